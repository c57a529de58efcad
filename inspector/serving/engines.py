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
- Trees (topk > 1) are SGLang's alone: vLLM drafts chains.
"""

from __future__ import annotations

from enum import Enum


class Engine(str, Enum):
    VLLM = "vllm"
    SGLANG = "sglang"

    @property
    def overlap_round(self) -> bool:
        """Whether a request's stop is followed by one more counted round (SGLang's overlap
        scheduler, its default)."""
        return self is Engine.SGLANG

    @property
    def display(self) -> str:
        return "vLLM" if self is Engine.VLLM else "SGLang"


ENGINES = tuple(e.value for e in Engine)


def default_engine(is_chain: bool) -> Engine:
    """vLLM for chains, SGLang for trees (vLLM has no tree drafting)."""
    return Engine.VLLM if is_chain else Engine.SGLANG


def parse_engine(text: str | None, is_chain: bool) -> Engine:
    from inspector.errors import InputError

    if text is None:
        return default_engine(is_chain)
    try:
        engine = Engine(text.strip().lower())
    except ValueError:
        raise InputError(None, "--engine", f"{text!r}: one of {', '.join(ENGINES)}") from None
    if engine is Engine.VLLM and not is_chain:
        raise InputError(None, "--engine", "vllm drafts chains only (--topk 1): trees are SGLang's")
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
