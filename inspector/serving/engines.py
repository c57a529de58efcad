"""What each serving engine counts: the conventions behind the accept length it logs.

Both engines log **1 + accepted / rounds**, pooled over the rounds of every request, and in a
request's last round they count every drafted token that matched the target's own continuation,
also past EOS or max_tokens: the stop trims the output after the count is taken.

- vLLM (V1 scheduler, 0.32-0.33): per verification round `num_accepted = len(generated) - 1` is
  recorded before the output is cut at EOS / max_tokens. "Mean acceptance length" = 1 +
  num_accepted_tokens / num_drafts; the log line covers one stats interval (reset after each line),
  the Prometheus counters `vllm:spec_decode_num_drafts`, `..._num_accepted_tokens` (and
  `..._per_pos`) are cumulative. Per request, `spec_decode_metrics.per_step_accepted` lists every
  round's count.
- SGLang (0.5.x, `eagle_worker_v2`): `accept_lens = num_correct_drafts + 1` per round, never
  truncated. Its overlap scheduler (on by default) launches the next round before the previous
  one's result is read, so a request that ends by EOS, or by a round emitting several tokens that
  reaches max_new_tokens, runs and counts one more draft + verify after its stop (a request sure to
  end by length on its next token is skipped: output + 1 >= max_new_tokens before its last round).
  That round starts after the whole accepted path and bonus, and counts in the logs but not in
  the request's spec_verify_ct. The `accept len` log line ("Decode batch, ..., accept len: X.XX,
  accept rate: ...") covers 40 decode batches and resets; `avg_spec_accept_length` (server info
  `internal_states`) pools the completed 40-batch windows; a request's
  `meta_info.spec_accept_length` is completion_tokens / spec_verify_ct, the prefill's token
  included, the stop token too.
- llama.cpp (`llama-server`, llama.cpp@0c1e57098 as vendored by llama-cpp-python 0.3.36): the
  prefill's token first (as vLLM); each round drafts at most min(k, remaining - 1) tokens, with
  remaining = max new tokens - tokens generated (`get_n_draft_max`, tools/server/
  server-context.cpp 453-471); a round where that is <= 0 drafts nothing and is a plain decode
  (2983-2985), and only rounds that verified a draft are counted (`n_draft_verif_steps`, 3880-3887,
  3961-3962). Per request it logs "mean len = 1 + accepted / steps" (628-648); `/metrics` has
  `llamacpp:spec_decode_num_{drafts,draft_tokens,accepted_tokens}_total` and
  `..._num_accepted_tokens_per_pos_total{position="i"}` (tools/server/server-task.cpp 1554-1615).
  A request's last round therefore never drafts past max tokens; where the request stopped by
  EOS its max tokens are not known and the round drafts k.
- Trees (topk > 1) are SGLang's alone: vLLM and llama.cpp draft chains.
"""

from __future__ import annotations

from enum import Enum

from inspector.engine_names import engine_words


class Engine(str, Enum):
    VLLM = "vllm"
    SGLANG = "sglang"
    LLAMACPP = "llamacpp"

    @property
    def caps_at_remaining(self) -> bool:
        """Whether a round drafts at most the tokens left before max tokens, less one, and a
        round with no room is a plain decode (llama.cpp's `llama-server`)."""
        return self is Engine.LLAMACPP

    @property
    def overlap_round(self) -> bool:
        """Whether a request's stop is followed by one more counted round (SGLang's overlap
        scheduler, its default)."""
        return self is Engine.SGLANG

    @property
    def display(self) -> str:
        return engine_words(self.value)


ENGINES = tuple(e.value for e in Engine)
CHAIN_ONLY = (Engine.VLLM, Engine.LLAMACPP)


def default_engine(is_chain: bool) -> Engine:
    """vLLM for chains, SGLang for trees (vLLM has no tree drafting)."""
    return Engine.VLLM if is_chain else Engine.SGLANG


def parse_engine(text: str | None, is_chain: bool) -> Engine:
    """The engine `text` names, in any of the spellings people type: vllm / vLLM, sglang /
    SGLang, llamacpp / llama.cpp / llama-cpp / llama_cpp (any case); an unknown name is an
    InputError that says the nearest one. None: the default for a chain or a tree."""
    import difflib

    from inspector.errors import InputError

    if text is None:
        return default_engine(is_chain)
    key = "".join(c for c in text.strip().lower() if c not in ".-_ ")
    try:
        engine = Engine(key)
    except ValueError:
        near = difflib.get_close_matches(key, ENGINES, n=1, cutoff=0.65)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise InputError(None, "--engine", f"{text!r}: one of {', '.join(ENGINES)}{hint}") from None
    if engine in CHAIN_ONLY and not is_chain:
        raise InputError(
            None, "--engine", f"{engine.value} drafts chains only (--topk 1): trees are SGLang's"
        )
    return engine


def conventions(engine: Engine) -> dict[str, str]:
    """What each pooled figure of a report means under `engine`, for the JSON."""
    common = {
        "accept_length": "1 + accepted / rounds, pooled over every round of every request",
        "accepted": (
            "drafted tokens that matched the target's own continuation, in a request's last "
            "round also past its stop (EOS or max tokens), as the engine counts them"
        ),
        "emitted_per_round": "tokens the requests received per round (the last round cut at the stop)",
        "per_depth": "[k]: share of rounds accepting at least k + 1 drafted tokens",
    }
    if engine is Engine.LLAMACPP:
        return {
            **common,
            "engine": "llamacpp",
            "rounds": (
                "verification steps with a draft (llama-server n_draft_verif_steps): each round "
                "drafts min(k, remaining - 1) tokens, a round with no room is a plain decode and "
                "not counted"
            ),
            "logged_as": (
                "llama-server's per-request 'mean len' (1 + accepted / steps) and 1 + "
                "llamacpp:spec_decode_num_accepted_tokens_total / "
                "llamacpp:spec_decode_num_drafts_total (/metrics, cumulative)"
            ),
            "per_sample": "accepted: each counted round's accepted draft tokens",
        }
    if engine is Engine.VLLM:
        return {
            **common,
            "engine": "vllm",
            "rounds": "verification rounds with drafts (vllm:spec_decode_num_drafts)",
            "logged_as": (
                "vLLM 'Mean acceptance length' (one stats interval: equal when one interval "
                "covers the run) and 1 + vllm:spec_decode_num_accepted_tokens / "
                "vllm:spec_decode_num_drafts (Prometheus, cumulative)"
            ),
            "per_sample": "accepted: each round's count, vLLM's spec_decode_metrics.per_step_accepted",
        }
    return {
        **common,
        "engine": "sglang",
        "rounds": (
            "verify rounds, with the overlap scheduler's one more round after a request's stop "
            "(by EOS, or by a multi-token round reaching max_new_tokens)"
        ),
        "logged_as": (
            "SGLang avg_spec_accept_length (server info: pooled over completed 40-batch "
            "windows); its 'accept len' log line covers one 40-batch window"
        ),
        "per_sample": (
            "spec_accept_length: completion_tokens / spec_verify_ct, the prefill's token "
            "included, the round after the stop not (SGLang's meta_info)"
        ),
    }
