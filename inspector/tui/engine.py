"""The one thread that owns the device, and the messages it sends back to the UI.

Everything that touches torch runs here: loading, forwards, slot norms, the doctor, exports. The UI
thread only posts requests and reads the numpy results that come back as messages.

Requests are not a plain queue:
- a view request (sample + wirings) *replaces* any view request not yet started, so a held key
  costs one forward, not one per repeat; every result carries the generation number of its
  request, and the UI paints only results of the latest generation;
- tasks (doctor, export) run next, in order;
- then the prefetch of the neighbouring samples;
- then, while idle, the set-wide fill: per-sample metrics of the current and pinned wirings for the
  sample list and the whole-set totals, sent back in batches.
torch is imported by this thread, never by the UI thread, so the first paint does not wait for it.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from textual.message import Message

from inspector.cache import ByteLRU

if TYPE_CHECKING:  # numpy/torch types only; never imported at module load
    import numpy as np

    from inspector.formats.tokenizer import TokenDecoder
    from inspector.memory import MemoryBudget
    from inspector.session import Inputs

WiringKey = tuple[int, ...]


# --- data sent to the UI ---------------------------------------------------------------------
@dataclass
class Session:
    """What the UI needs to know about the loaded draft and sample set."""

    checkpoint: str
    name: str
    layout: str
    device: str
    dtype: str
    files: list[str]
    sample_format: str
    slot_info: list[Any]  # SlotInfo
    n_blocks: int
    ttt_steps: int
    fc_norms: list[float]
    presets: dict[str, WiringKey | None]
    preset_errors: dict[str, str]
    initial: WiringKey | None
    initial_error: str | None
    decoder: TokenDecoder
    tokenizer: str | None
    input_paths: list[str]
    notes: list[str] = field(default_factory=list)
    load_s: float = 0.0
    budget: MemoryBudget | None = None  # the caches' byte budget (the app's views take a share)

    def slot_label(self, i: int) -> str:
        return self.slot_info[i].label if 0 <= i < len(self.slot_info) else f"s{i}"

    def wiring_label(self, w: Sequence[int]) -> str:
        return "[" + ", ".join(self.slot_label(i) for i in w) + "]"

    def preset_name(self, w: Sequence[int]) -> str | None:
        for name, p in self.presets.items():
            if p is not None and tuple(p) == tuple(w):
                return name
        return None


@dataclass
class SampleData:
    """The wiring-independent part of a sample, as numpy (computed once per sample)."""

    index: int
    path: str
    length: int
    input_ids: np.ndarray  # int64 [T]
    loss_mask: np.ndarray  # bool [T]
    texts: list[str]  # visible text of every token
    ends_line: list[bool]
    slot_norms: np.ndarray  # [S, T] float32, NaN/Inf kept
    slot_mean: np.ndarray  # [S] mean norm over the hidden states of loss-masked rows
    slot_nonfinite: np.ndarray  # [S] count of positions with a NaN/Inf norm
    warnings: list[str] = field(default_factory=list)


# --- messages ----------------------------------------------------------------------------------
class LoadProgress(Message):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class Loaded(Message):
    def __init__(self, session: Session) -> None:
        super().__init__()
        self.session = session


class LoadFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class ViewData(Message):
    """Predictions of one sample under some wirings; prefetch=True when nobody asked to see it."""

    def __init__(self, gen: int, sample: SampleData, preds: dict[WiringKey, Any], prefetch: bool):
        super().__init__()
        self.gen = gen
        self.sample = sample
        self.preds = preds
        self.prefetch = prefetch


class ViewFailed(Message):
    def __init__(self, gen: int, sample: int, error: str, kind: str) -> None:
        super().__init__()
        self.gen = gen
        self.sample = sample
        self.error = error
        self.kind = kind  # "sample" (bad input), "oom", "error"


class StatsBatch(Message):
    """Per-sample metrics (sample, wiring, [StepMetrics], length) and failed samples."""

    def __init__(
        self,
        items: list[tuple[int, WiringKey, list, int]],
        errors: list[tuple[int, str]],
    ) -> None:
        super().__init__()
        self.items = items
        self.errors = errors


class TaskDone(Message):
    def __init__(self, kind: str, result: Any = None, error: str | None = None) -> None:
        super().__init__()
        self.kind = kind
        self.result = result
        self.error = error


# --- loading -------------------------------------------------------------------------------------
Loader = Callable[[Callable[[str], None]], tuple[Any, "TokenDecoder", list[str]]]


def default_loader(
    inputs: Inputs,
    *,
    device: str = "auto",
    dtype: str = "auto",
    ttt_steps: int = 1,
    memory_budget: str | None = None,
) -> Loader:
    """A loader for the real inputs: evaluator exactly as the CLI builds it, plus the tokenizer."""

    def load(progress: Callable[[str], None]) -> tuple[Any, TokenDecoder, list[str]]:
        progress("importing torch")
        import torch

        leave_a_core_for_the_ui(torch, device)

        from inspector.session import load_decoder, load_evaluator

        progress(f"loading {inputs.checkpoint} onto {device}")
        ev = load_evaluator(
            inputs, device=device, dtype=dtype, ttt_steps=ttt_steps, memory_budget=memory_budget
        )
        progress(f"reading the first of {len(ev.samples)} samples")
        ev.samples.first  # noqa: B018 - slot layout comes from the first sample
        decoder, notes = load_decoder(inputs)
        return ev, decoder, notes

    return load


def leave_a_core_for_the_ui(torch: Any, device: str) -> None:
    """On CPU, run torch on all cores but one, so the UI thread keeps a core of its own.

    torch's intra-op threads spin while they wait; with as many of them as cores, the UI thread
    and every forward fight for the same cores and both slow down many times over (measured on
    2 cores: 0.34 s instead of 5 ms per demo sample). OMP_NUM_THREADS, when set, wins.
    """
    import os

    if os.environ.get("OMP_NUM_THREADS") or str(device).startswith("cuda"):
        return
    if str(device) == "auto" and torch.cuda.is_available():
        return
    cores = os.cpu_count() or 1
    if cores > 1 and torch.get_num_threads() >= cores:
        torch.set_num_threads(cores - 1)


def _error_text(e: BaseException) -> str:
    from inspector.errors import InputError

    if isinstance(e, InputError):
        return str(e)
    return f"{type(e).__name__}: {e}"


def _is_oom(e: BaseException) -> bool:
    return "OutOfMemoryError" in type(e).__name__ or "out of memory" in str(e).lower()


# --- the engine ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _ViewRequest:
    gen: int
    sample: int
    wirings: tuple[WiringKey, ...]
    prefetch: tuple[int, ...]


class Engine:
    """Owns the evaluator in one daemon thread; see the module docstring for the scheduling."""

    STATS_BATCH = 32
    STATS_INTERVAL = 0.15

    def __init__(
        self,
        post: Callable[[Message], Any],
        loader: Loader,
        *,
        initial_wiring: str | None = None,
        fill: bool = True,
        input_paths: Sequence[str] = (),
    ) -> None:
        self._post = post
        self._loader = loader
        self._initial_spec = initial_wiring
        self._fill_enabled = fill
        self._input_paths = [str(p) for p in input_paths]
        self._cond = threading.Condition()
        self._stop = False
        self._view: _ViewRequest | None = None
        self._tasks: deque[tuple[str, Callable[[Any], Any]]] = deque()
        self._prefetch: deque[tuple[int, tuple[WiringKey, ...]]] = deque()
        self._fill_wirings: list[WiringKey] = []
        self._fill_pos: dict[WiringKey, int] = {}
        self._done: set[tuple[int, WiringKey]] = set()
        self._bad: set[int] = set()
        self._stats: list[tuple[int, WiringKey, list, int]] = []
        self._stat_errors: list[tuple[int, str]] = []
        self._last_flush = time.monotonic()
        self._current = 0
        self._neighbours: tuple[int, ...] = ()
        self._sample_data: ByteLRU[int, SampleData] = ByteLRU(0)  # sized once loaded
        self.ev: Any = None
        self.session: Session | None = None
        self._thread = threading.Thread(target=self._run, name="eagle-inspect-device", daemon=True)
        self.busy = False  # a job is running (read by the UI for its indicator)

    # --- UI-thread API ----------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def request_view(
        self, gen: int, sample: int, wirings: Sequence[WiringKey], prefetch: Sequence[int] = ()
    ) -> None:
        """Compute (or fetch) a sample under wirings; replaces any view request not yet started."""
        with self._cond:
            self._view = _ViewRequest(gen, sample, tuple(wirings), tuple(prefetch))
            self._cond.notify_all()

    def request_prefetch(self, sample: int, samples: Sequence[int], wirings: Sequence[WiringKey]):
        """Warm samples under wirings at low priority (when the view itself came from the UI cache)."""
        with self._cond:
            self._current = sample
            self._prefetch = deque((s, tuple(wirings)) for s in samples)
            self._cond.notify_all()

    def set_fill(self, wirings: Sequence[WiringKey]) -> None:
        """Fill per-sample metrics for these wirings, in order, while idle."""
        with self._cond:
            self._fill_wirings = list(dict.fromkeys(tuple(w) for w in wirings))
            for w in self._fill_wirings:
                self._fill_pos.setdefault(w, 0)
            self._cond.notify_all()

    def submit(self, kind: str, fn: Callable[[Any], Any]) -> None:
        """Run fn(evaluator) on the device thread; a TaskDone(kind, result|error) comes back."""
        with self._cond:
            self._tasks.append((kind, fn))
            self._cond.notify_all()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def idle(self) -> bool:
        """Nothing running or queued except fill (for tests and benchmarks)."""
        with self._cond:
            return not self.busy and self._view is None and not self._tasks and not self._prefetch

    def fill_pending(self) -> bool:
        with self._cond:
            return self._next_fill() is not None or bool(self._stats or self._stat_errors)

    # --- the thread --------------------------------------------------------------------------------
    def _send(self, message: Message) -> None:
        try:
            self._post(message)
        except Exception:  # noqa: BLE001 - the app may be closing
            pass

    def _run(self) -> None:
        t0 = time.perf_counter()
        try:
            ev, decoder, notes = self._loader(lambda text: self._send(LoadProgress(text)))
            self.ev = ev
            budget = getattr(ev, "budget", None)
            self._sample_data.max_bytes = (
                budget.host_share("app_samples") if budget is not None else 256 * 2**20
            )
            self.session = self._make_session(ev, decoder, notes, time.perf_counter() - t0)
        except BaseException as e:  # noqa: BLE001 - reported in the app, which stays up
            self._send(LoadFailed(_error_text(e)))
            return
        self._send(Loaded(self.session))
        while True:
            job = self._take()
            if job is None:
                return
            self.busy = True
            try:
                job()
            except BaseException:  # noqa: BLE001 - a bug in a job must not kill the device thread
                self._send(TaskDone("internal", error=traceback.format_exc(limit=4)))
            finally:
                self.busy = False

    def _take(self) -> Callable[[], None] | None:
        with self._cond:
            while True:
                if self._stop:
                    return None
                if self._view is not None:
                    req, self._view = self._view, None
                    return lambda: self._serve_view(req)
                if self._tasks:
                    kind, fn = self._tasks.popleft()
                    return lambda: self._run_task(kind, fn)
                if self._prefetch:
                    sample, wirings = self._prefetch.popleft()
                    return lambda: self._serve_prefetch(sample, wirings)
                item = self._next_fill() if self._fill_enabled else None
                if item is not None:
                    return lambda: self._fill_one(*item)
                if self._stats or self._stat_errors:
                    return self._flush_stats
                self._cond.wait()

    def _make_session(self, ev: Any, decoder: TokenDecoder, notes: list[str], load_s: float):
        draft = ev.draft
        infos = ev.slot_info
        presets: dict[str, WiringKey | None] = {}
        preset_errors: dict[str, str] = {}
        for name in ("train", "serve"):
            try:
                presets[name] = ev.wiring(name).slots
            except Exception as e:  # noqa: BLE001
                presets[name] = None
                preset_errors[name] = _error_text(e)
        initial: WiringKey | None = None
        initial_error = None
        spec = self._initial_spec or "train"
        try:
            initial = ev.wiring(spec).slots
        except Exception as e:  # noqa: BLE001
            initial_error = f"--wiring {spec}: {_error_text(e)}"
            initial = presets.get("train") or presets.get("serve")
        all_notes = list(getattr(draft, "notes", []) or []) + notes
        return Session(
            checkpoint=str(draft.path),
            name=str(draft.name),
            layout=str(draft.layout),
            device=str(ev.device),
            dtype=str(draft.dtype).replace("torch.", ""),
            files=[str(f) for f in ev.samples.files],
            sample_format=str(ev.samples.format),
            slot_info=list(infos),
            n_blocks=int(ev.n_blocks),
            ttt_steps=int(ev.ttt_steps),
            fc_norms=[float(x) for x in draft.fc_block_norms()],
            presets=presets,
            preset_errors=preset_errors,
            initial=initial,
            initial_error=initial_error,
            decoder=decoder,
            tokenizer=decoder.source,
            input_paths=self._input_paths,
            notes=all_notes,
            load_s=load_s,
            budget=getattr(ev, "budget", None),
        )

    # --- jobs --------------------------------------------------------------------------------------
    def sample_data(self, i: int) -> SampleData:
        """The wiring-independent arrays of sample i (device thread only)."""
        cached = self._sample_data.get(i)
        if cached is not None:
            return cached
        import numpy as np

        ev = self.ev
        s = ev.samples[i]
        ids = s.input_ids.numpy().astype(np.int64)
        mask = s.loss_mask.numpy().astype(bool)
        norms = np.asarray(ev.slot_norms(i), dtype=np.float32)
        t = ids.size
        # Row j reads the hidden states at position j and counts when loss_mask[j + 1] is set.
        rows = np.zeros(t, dtype=bool)
        rows[: max(t - 2, 0)] = mask[1 : t - 1]
        sel = rows if rows.any() else np.ones(t, dtype=bool)
        with np.errstate(invalid="ignore", over="ignore"):
            mean = norms[:, sel].astype(np.float64).mean(axis=1)
        nonfinite = (~np.isfinite(norms)).sum(axis=1)
        decoder = self.session.decoder if self.session else None
        if decoder is not None:
            texts = [decoder.visible(int(x)) for x in ids]
            ends = [decoder.ends_line(int(x)) for x in ids]
        else:
            texts, ends = [str(int(x)) for x in ids], [False] * t
        data = SampleData(
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
        return self._sample_data.put(i, data)

    def _predict_all(self, i: int, wirings: Sequence[WiringKey]) -> dict[WiringKey, Any]:
        from inspector.wiring import Wiring

        preds: dict[WiringKey, Any] = {}
        for w in wirings:
            if w not in preds:
                preds[w] = self.ev.predict(i, Wiring(tuple(w)))
                self._note(i, w, preds[w])
        return preds

    def _note(self, i: int, w: WiringKey, pred: Any) -> None:
        key = (i, w)
        if key in self._done:
            return
        self._done.add(key)
        length = int(pred.steps[0].pos.size + 2) if pred.steps else 0
        self._stats.append((i, w, list(pred.metrics), length))

    def _failed(self, i: int, e: BaseException) -> tuple[str, str]:
        if _is_oom(e):
            try:
                import torch

                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
            except Exception:  # noqa: BLE001
                pass
            return "oom", f"out of device memory on sample #{i}: {_error_text(e)}"
        from inspector.errors import InputError

        if isinstance(e, InputError):
            self._bad.add(i)
            return "sample", _error_text(e)
        return "error", _error_text(e)

    def _serve_view(self, req: _ViewRequest) -> None:
        self._current = req.sample
        self._neighbours = req.prefetch
        try:
            data = self.sample_data(req.sample)
            preds = self._predict_all(req.sample, req.wirings)
        except Exception as e:  # noqa: BLE001 - shown in the app
            kind, text = self._failed(req.sample, e)
            self._send(ViewFailed(req.gen, req.sample, text, kind))
        else:
            self._send(ViewData(req.gen, data, preds, prefetch=False))
        n = len(self.ev.samples)
        with self._cond:
            self._prefetch = deque(
                (s, req.wirings) for s in req.prefetch if 0 <= s < n and s not in self._bad
            )
        self._flush_stats()

    def _serve_prefetch(self, sample: int, wirings: tuple[WiringKey, ...]) -> None:
        if sample in self._bad or not (0 <= sample < len(self.ev.samples)):
            return
        try:
            data = self.sample_data(sample)
            preds = self._predict_all(sample, wirings)
        except Exception as e:  # noqa: BLE001 - the sample's row gets marked
            kind, text = self._failed(sample, e)
            if kind == "sample":
                self._stat_errors.append((sample, text))
        else:
            self._send(ViewData(-1, data, preds, prefetch=True))
        self._keep_warm()

    def _next_fill(self) -> tuple[int, WiringKey] | None:
        if self.ev is None:
            return None
        n = len(self.ev.samples)
        for w in self._fill_wirings:
            pos = self._fill_pos.get(w, 0)
            while pos < n and ((pos, w) in self._done or pos in self._bad):
                pos += 1
            self._fill_pos[w] = pos
            if pos < n:
                return pos, w
        return None

    def _fill_one(self, i: int, w: WiringKey) -> None:
        from inspector.wiring import Wiring

        try:
            pred = self.ev.predict(i, Wiring(w))
        except Exception as e:  # noqa: BLE001
            kind, text = self._failed(i, e)
            if kind != "sample":  # not the sample's fault: do not retry it in a loop
                self._bad.add(i)
            self._stat_errors.append((i, text))
        else:
            self._note(i, w, pred)
        self._keep_warm()
        now = time.monotonic()
        if len(self._stats) >= self.STATS_BATCH or now - self._last_flush > self.STATS_INTERVAL:
            self._flush_stats()

    def _keep_warm(self) -> None:
        warm = getattr(self.ev, "keep_warm", None)
        if warm is None:
            return
        try:
            for s in (*self._neighbours[:1], self._current):
                warm(s)
        except Exception:  # noqa: BLE001 - warming is best effort
            pass

    def _flush_stats(self) -> None:
        self._last_flush = time.monotonic()
        if not self._stats and not self._stat_errors:
            return
        items, self._stats = self._stats, []
        errors, self._stat_errors = self._stat_errors, []
        self._send(StatsBatch(items, errors))

    def _run_task(self, kind: str, fn: Callable[[Any], Any]) -> None:
        try:
            result = fn(self.ev)
        except Exception as e:  # noqa: BLE001 - shown in the app
            if _is_oom(e):
                self._failed(-1, e)
            self._send(TaskDone(kind, error=_error_text(e)))
        else:
            self._send(TaskDone(kind, result=result))
