"""The app's one `Backend`: the `Evaluator` the CLI loads, and a `Replayer` over it, as numpy.

Device thread only: `LoadResult.backend` imports this once the loader has imported torch. Torch
itself is still imported inside the methods, so the import-boundary test can import the whole
engine side without it. No Textual here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from inspector.tui.events import SampleAccept, SampleTrees
from inspector.tui.summary import (
    LoggedFigure,
    SampleData,
    Summary,
    accept_at,
    default_serving,
    error_text,
)
from inspector.wiring import PRESETS

if TYPE_CHECKING:
    from inspector.capture.transformers_target import TargetModel
    from inspector.evaluate import Evaluator, SamplePredictions
    from inspector.formats.tokenizer import TokenDecoder
    from inspector.memory import MemoryBudget
    from inspector.serving.replay import Replayer, SampleReplay
    from inspector.serving.sampling_settings import SamplingSettings
    from inspector.serving.spec import DraftSpec
    from inspector.tui.events import SampleComparison
    from inspector.tui.second_draft import SecondDraft
    from inspector.tui.tau_settings import Serving
    from inspector.wiring import Wiring, WiringKey


class EvaluatorBackend:
    """`backend.Backend` over an `Evaluator` (see there for what each method promises)."""

    def __init__(
        self,
        ev: Evaluator,
        target: str | None = None,
        target_dtype: str = "auto",
        second: SecondDraft | None = None,
    ) -> None:
        self._ev = ev
        self._second = second  # `open --compare`: loaded when first compared or shown
        # per draft ("A", "B"): made on first use, under the first settings
        self._replayers: dict[str, Replayer] = {}
        # The target a temperature's τ verifies with: loaded on the first such replay (a large
        # model; greedy τ never needs it), or why it did not load.
        self._target_dir = target
        self._target_dtype = target_dtype
        self._target: TargetModel | None = None
        self._target_error: str | None = None
        self._summary: Summary | None = None  # summarize's, which the second draft's extends

    @property
    def evaluator(self) -> Evaluator:
        return self._ev

    @property
    def n_samples(self) -> int:
        return len(self._ev.samples)

    @property
    def budget(self) -> MemoryBudget | None:
        # Test loaders wrap the evaluator and may have no budget: the app then uses fixed sizes.
        return getattr(self._ev, "budget", None)

    def summarize(
        self,
        decoder: TokenDecoder,
        notes: list[str],
        *,
        initial_wiring: str | None,
        input_paths: Sequence[str],
        load_s: float,
        first_sample: int = 0,
        skipped: Sequence[tuple[int, str]] = (),
        logged: LoggedFigure | None = None,
        sampling: SamplingSettings | None = None,
    ) -> Summary:
        from inspector.serving.spec import DraftSpec
        from inspector.tui.tau_settings import Serving

        ev = self._ev
        draft = ev.draft
        presets, preset_errors = _presets(ev)
        initial: WiringKey | None = None
        initial_error = None
        text = initial_wiring or "train"
        try:
            initial = ev.wiring(text).slots
        except Exception as e:  # noqa: BLE001 - shown in the app, which falls back to a preset
            initial_error = f"--wiring {text}: {error_text(e)}"
            initial = presets.get("train") or presets.get("serve")
        summary = Summary(
            checkpoint=str(draft.path),
            name=str(draft.name),
            layout=str(draft.layout),
            device=str(ev.device),
            dtype=draft.dtype_label,
            files=[str(f) for f in ev.samples.files],
            sample_format=str(ev.samples.format),
            slot_info=list(ev.slot_info),
            n_blocks=int(ev.n_blocks),
            ttt_steps=int(ev.ttt_steps),
            fc_norms=[float(x) for x in draft.fc_block_norms()],
            presets=presets,
            preset_errors=preset_errors,
            initial=initial,
            initial_error=initial_error,
            decoder=decoder,
            tokenizer=decoder.source,
            input_paths=list(input_paths),
            notes=[*draft.notes, *([draft.dtype_note] if draft.dtype_note else []), *notes],
            load_s=load_s,
            budget=self.budget,
            has_verifier=bool(getattr(ev, "has_verifier", False)),
            first_sample=first_sample,
            skipped=list(skipped),
            # τ starts under the engine's settings where its log shows them (a chain of k)
            serving=Serving(
                default_serving(int(ev.ttt_steps))
                if logged is None or not logged.steps
                else DraftSpec(logged.steps),
                sampling,
            ),
            logged=logged,
            target=self._target_dir,
            compare=None if self._second is None else self._second.checkpoint,
            compare_wiring=None if self._second is None else self._second.wiring_text,
        )
        self._summary = summary
        return summary

    def sample_data(self, i: int, decoder: TokenDecoder | None) -> SampleData:
        import numpy as np

        s = self._ev.samples[i]
        ids = s.input_ids.numpy().astype(np.int64)
        mask = s.loss_mask.numpy().astype(bool)
        norms = np.asarray(self._ev.slot_norms(i), dtype=np.float32)
        t = ids.size
        # Row j reads the hidden states at position j and counts when loss_mask[j + 1] is set.
        rows = np.zeros(t, dtype=bool)
        rows[: max(t - 2, 0)] = mask[1 : t - 1]
        sel = rows if rows.any() else np.ones(t, dtype=bool)
        with np.errstate(invalid="ignore", over="ignore"):
            mean = norms[:, sel].astype(np.float64).mean(axis=1)
        nonfinite = (~np.isfinite(norms)).sum(axis=1)
        if decoder is not None:
            texts = [decoder.visible(int(x)) for x in ids]
            ends = [decoder.ends_line(int(x)) for x in ids]
        else:
            texts, ends = [str(int(x)) for x in ids], [False] * t
        return SampleData(
            index=i,
            path=str(s.path),
            length=t,
            input_ids=ids,
            loss_mask=mask,
            texts=texts,
            ends_line=ends,
            slot_norms=norms,
            slot_mean=mean,
            slot_nonfinite=nonfinite,
            warnings=list(s.warnings),
        )

    def predict(self, i: int, wiring: WiringKey) -> SamplePredictions:
        ev, w = self._feed(wiring)
        return ev.predict(i, w)

    def _feed(self, key: WiringKey) -> tuple[Evaluator, Wiring]:
        """The evaluator of the draft `key` feeds (`drafts`) and its wiring (the second draft's
        InputError when it does not load)."""
        from inspector.tui.drafts import is_second, slots_of
        from inspector.wiring import Wiring

        if not is_second(key):
            return self._ev, Wiring(tuple(key))
        return self._second_draft().load(self._ev)[0], Wiring(slots_of(key))

    def _second_draft(self) -> SecondDraft:
        from inspector.errors import InputError

        if self._second is None:
            raise InputError(None, "--compare", "no second draft: open with --compare CKPT_B")
        return self._second

    def second_summary(self) -> Summary:
        """The second draft loaded, and its summary (`Summary.second`): its checkpoint, fc
        blocks and presets over the same samples; `initial` its --compare-wiring (a wiring that
        does not fit B fails its load, as `b` would)."""
        from dataclasses import replace

        ev_b, w_b = self._second_draft().load(self._ev)
        assert self._summary is not None, "summarize runs first"
        presets, preset_errors = _presets(ev_b)
        d = ev_b.draft
        return replace(
            self._summary,
            checkpoint=str(d.path),
            name=str(d.name),
            layout=str(d.layout),
            dtype=d.dtype_label,
            n_blocks=int(ev_b.n_blocks),
            ttt_steps=int(ev_b.ttt_steps),
            fc_norms=[float(x) for x in d.fc_block_norms()],
            presets=presets,
            preset_errors=preset_errors,
            initial=w_b.slots,
            initial_error=None,
            notes=[*d.notes, *([d.dtype_note] if d.dtype_note else [])],
            compare=None,
            compare_wiring=None,
            second=None,
        )

    def replay(self, i: int, wiring: WiringKey, serving: Serving) -> SampleAccept:
        """The walk is cached by the Replayer's ByteLRU under the budget's `replays` share, keyed
        by (sample, wiring, drafting settings); at a temperature each round's odds come from the
        target's verification of the draft's trees (`serving.expected_replay`)."""

        spec = serving.spec
        ev, w, r = self._walk(i, wiring, spec)
        mask = ev.samples[i].loss_mask.numpy()
        a_at = accept_at(r.a_by_start, mask)
        expected = odds = None
        if serving.sampling is not None:
            from inspector.serving.expectation import OddsTotals
            from inspector.serving.expected_replay import sample_odds

            s = serving.sampling
            so = sample_odds(ev, self.target(), r, w, spec, s.sampling, s.verification)
            expected, odds = so.expected, OddsTotals.of(so, r.accepted, spec.steps)
        return SampleAccept(
            i,
            tuple(wiring),
            serving,
            r.a_by_start,
            r.starts,
            r.accepted,
            r.emitted,
            r.stats,
            a_at,
            expected,
            odds,
        )

    def _walk(
        self, i: int, key: WiringKey, spec: DraftSpec
    ) -> tuple[Evaluator, Wiring, SampleReplay]:
        """The walk through sample i of the draft `key` feeds (with its evaluator and wiring),
        one Replayer per draft."""
        from inspector.doctor.wiring.engine_run import engine_run
        from inspector.engines import default_engine
        from inspector.serving.replay import Replayer
        from inspector.tui.drafts import draft_letter

        ev, w = self._feed(key)
        engine = default_engine(spec.is_chain)
        at = f"{draft_letter(key)}:{engine.value}"
        replayer = self._replayers.get(at)
        if replayer is None:
            # τ counts the draft as that engine runs it (`doctor.wiring.engine_run`: SGLang without
            # norm_before_residual, ...), as `accept` does; an unchanged draft keeps its caches
            run = engine_run(ev.draft, engine.value)
            served = ev.with_draft(run.draft) if run.changed else ev
            replayer = self._replayers[at] = Replayer(served, spec, engine)
        replayer.spec = spec  # the cache key holds the settings
        return replayer.ev, w, replayer.replay(i, w)

    def compare(self, i: int, wiring: WiringKey, spec: DraftSpec) -> SampleComparison:
        from inspector.tui.drafts import second_key

        second = self._second_draft()
        _, w_b = second.load(self._ev)
        rep_a = self._walk(i, wiring, spec)[2]
        rep_b = self._walk(i, second_key(w_b.slots), spec)[2]
        return second.compare(self._ev, i, wiring, spec, rep_a, rep_b)

    def target(self) -> TargetModel:
        """The target model, loaded once onto the draft's device (ServingError, the same each
        time, when there is none or it does not load)."""
        from inspector.tui.backend import ServingError

        if self._target is not None:
            return self._target
        if self._target_error is None and self._target_dir is None:
            self._target_error = (
                "τ at a temperature needs the target's distributions: open with --target DIR"
            )
        if self._target_error is None:
            from inspector.capture.transformers_target import TargetModel

            try:
                self._target = TargetModel(
                    self._target_dir, dtype=self._target_dtype, device=str(self._ev.device)
                )
            except Exception as e:  # noqa: BLE001 - the settings' fault, said in the app
                self.free_after_oom(e)
                self._target_error = f"the target did not load: {error_text(e)}"
            else:
                return self._target
        raise ServingError(self._target_error)

    def trees(self, i: int, wiring: WiringKey, spec: DraftSpec) -> SampleTrees:
        from inspector.tui.trees import sample_trees

        ev, w = self._feed(wiring)
        return sample_trees(ev, i, wiring, w, spec)

    def keep_warm(self, i: int) -> None:
        warm = getattr(self._ev, "keep_warm", None)  # a test's wrapped evaluator may lack it
        if warm is not None:
            warm(i)

    def free_after_oom(self, e: BaseException) -> bool:
        from inspector.evaluate import is_oom

        if not is_oom(e):
            return False
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001 - freeing is best effort
            pass
        return True


def _presets(ev: Evaluator) -> tuple[dict[str, WiringKey | None], dict[str, str]]:
    """A draft's presets over the samples' slots, or why each does not fit."""
    presets: dict[str, WiringKey | None] = {}
    errors: dict[str, str] = {}
    for name in PRESETS:
        try:
            presets[name] = ev.wiring(name).slots
        except Exception as e:  # noqa: BLE001 - shown in the app
            presets[name] = None
            errors[name] = error_text(e)
    return presets, errors
