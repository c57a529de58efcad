"""Run EAGLE-3 drafts under the real llama.cpp (`llama-server`) and keep everything it reports.

Standard library only (the converter runs in a subprocess with the interpreter given). Given a
llama.cpp source tree (its `convert_hf_to_gguf.py`, `conversion/`, `gguf-py/`) and its built
`llama-server`:

1. converts the target and each draft variant to GGUF (float32) with llama.cpp's own converter.
   Two shims, both about the demo's tokenizer and nothing else: the demo has no
   `tokenizer.model`, so the sentencepiece path is told so (it would raise FileNotFoundError with
   sentencepiece installed; here sentencepiece is absent and it raises ModuleNotFoundError), and
   its BPE pre-tokenizer is not in the converter's table, so it is named "gpt-2" (prompts go in
   as token ids: this changes only how text prints).
2. serves each (variant, k): `llama-server -m target.gguf -md draft.gguf --spec-type
   draft-eagle3 --spec-draft-n-max k`, f32 KV caches, one slot, one thread, greedy
   (temperature 0), no prompt cache, log verbosity 4 (its trace lines: per-position rates and
   the drafter's exact statistics); the prompts one at a time, `n_predict` tokens each.
   `--fresh NAME`: that variant gets a fresh server per request (llama-server's buffer for a
   state it never sets holds what the previous request left there; a fresh one holds zeros).

Each (variant, k) gets OUT/<variant>-k<k>/:

  requests.jsonl  one object per request, as the server answered (`content`, `tokens`,
                  `timings` with `draft_n` / `draft_n_accepted`, ...), plus `prompt_token_ids`
                  (what was sent), `output_ids` (= `tokens`) and `server_counters`: the
                  server's /metrics speculative counters read after the request, less those read
                  before it (drafts, draft_tokens, accepted, accepted_per_pos)
  metrics.prom    the server's /metrics text after the last request (a fresh server per
                  request: metrics-<i>.prom per request instead)
  server.log      what llama-server printed (one server after another with --fresh)

OUT/<variant>.gguf is the converted draft, OUT/<variant>.convert.log the converter's output,
OUT/target.gguf the target, OUT/runs.json the settings and timings.

    python .ci/run_llamacpp.py --src LLAMA_CPP --bin BUILD/bin --target assets/demo/target \
        --draft demo=assets/demo/draft --draft last=assets/demo/draft --aux-ids last=2,4,6 \
        --nest nested --draft nested=assets/demo/draft --fresh last \
        --prompts prompts.json --k 1,3,5 --max-tokens 128 --out runs/

`--aux-ids NAME=IDS` copies that variant's folder with `eagle_aux_hidden_state_layer_ids` set to
IDS; `--nest NAME` copies it with the ids moved under `eagle_config` (where llama.cpp's
converter does not look). The input folders are never modified.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

CONVERT = """
import runpy, sys
src = sys.argv[1]
sys.path.insert(0, src)
sys.path.insert(1, src + "/gguf-py")
import conversion.base as base

def no_sentencepiece(self, *args, **kwargs):
    raise FileNotFoundError("no tokenizer.model")

base.TextModel._set_vocab_sentencepiece = no_sentencepiece
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
sys.argv = ["convert_hf_to_gguf.py", *sys.argv[2:]]
runpy.run_path(src + "/convert_hf_to_gguf.py", run_name="__main__")
"""
COUNTERS = {
    "llamacpp:spec_decode_num_drafts_total": "drafts",
    "llamacpp:spec_decode_num_draft_tokens_total": "draft_tokens",
    "llamacpp:spec_decode_num_accepted_tokens_total": "accepted",
}
PER_POS = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"


def fail(msg: str) -> None:
    print(f"run_llamacpp.py: {msg}", file=sys.stderr)
    raise SystemExit(1)


def named(items: list[str], flag: str) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            fail(f"{flag} {item!r}: NAME=VALUE")
        out[name] = value
    return out


def convert(python: str, src: Path, args: list[str], log: Path) -> None:
    with log.open("w") as f:
        rc = subprocess.run(
            [python, "-c", CONVERT, str(src), *args], stdout=f, stderr=subprocess.STDOUT
        ).returncode
    if rc != 0:
        tail = log.read_text().strip().splitlines()[-1:] or ["(no output)"]
        fail(f"the converter failed ({log}): {tail[0]}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def counters(port: int) -> tuple[str, dict]:
    text = get(f"http://127.0.0.1:{port}/metrics").decode()
    out: dict = {v: 0 for v in COUNTERS.values()}
    per_pos: dict[int, int] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, value = line.rpartition(" ")
        if name in COUNTERS:
            out[COUNTERS[name]] = int(float(value))
        elif name.startswith(PER_POS + "{"):
            pos = int(name.split('position="', 1)[1].split('"', 1)[0])
            per_pos[pos] = int(float(value))
    out["accepted_per_pos"] = [per_pos[i] for i in sorted(per_pos)]
    return text, out


def delta(after: dict, before: dict) -> dict:
    d = {k: after[k] - before[k] for k in COUNTERS.values()}
    a, b = after["accepted_per_pos"], before["accepted_per_pos"]
    b = b + [0] * (len(a) - len(b))
    d["accepted_per_pos"] = [x - y for x, y in zip(a, b, strict=True)]
    return d


class Server:
    def __init__(self, binary: Path, target: Path, draft: Path, k: int, log) -> None:
        self.port = free_port()
        cmd = [str(binary), "-m", str(target), "-md", str(draft), "--spec-type", "draft-eagle3"]
        cmd += ["--spec-draft-n-max", str(k), "--metrics", "--port", str(self.port)]
        cmd += ["-t", "1", "-tb", "1", "-td", "1", "-c", "4096", "-np", "1", "--no-webui"]
        cmd += ["--no-warmup", "-ctk", "f32", "-ctv", "f32", "-ctkd", "f32", "-ctvd", "f32"]
        # trace level: each request's "acc per pos" line and the drafter's statistics line,
        # whose counts are exact (the default level prints the mean to 2 decimals only)
        cmd += ["-lv", "4"]
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                fail(f"llama-server exited at start (rc {self.proc.returncode}): see its log")
            try:
                if json.loads(get(f"http://127.0.0.1:{self.port}/health")).get("status") == "ok":
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.2)
        self.stop()
        fail("llama-server did not become healthy in 120 s")

    def complete(self, prompt: list[int], max_tokens: int) -> dict:
        body = {
            "prompt": prompt,
            "n_predict": max_tokens,
            "temperature": 0,
            "cache_prompt": False,
            "return_tokens": True,
        }
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/completion",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.loads(r.read())

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def serve(binary, target, draft, k, prompts, max_tokens, folder: Path, fresh: bool) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    with (folder / "server.log").open("w") as log:
        server = None
        for i, prompt in enumerate(prompts):
            if server is None:
                server = Server(binary, target, draft, k, log)
            _, before = counters(server.port)
            out = server.complete(prompt, max_tokens)
            text, after = counters(server.port)
            out["prompt_token_ids"] = prompt
            out["output_ids"] = out.get("tokens")
            out["server_counters"] = delta(after, before)
            rows.append(out)
            if fresh:
                (folder / f"metrics-{i}.prom").write_text(text)
                server.stop()
                server = None
        if server is not None:
            (folder / "metrics.prom").write_text(text)
            server.stop()
    with (folder / "requests.jsonl").open("w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", type=Path, required=True, help="llama.cpp's source tree")
    ap.add_argument("--bin", type=Path, required=True, help="the folder holding llama-server")
    ap.add_argument("--target", type=Path, required=True)
    ap.add_argument("--draft", action="append", default=[], help="NAME=FOLDER (repeatable)")
    ap.add_argument("--aux-ids", action="append", default=[], help="NAME=IDS: a copy with these")
    ap.add_argument("--nest", action="append", default=[], help="NAME: ids under eagle_config")
    ap.add_argument("--fresh", action="append", default=[], help="NAME: a server per request")
    ap.add_argument("--prompts", type=Path, required=True, help="tests/engine/prompts.py output")
    ap.add_argument("--k", default="3", help="--spec-draft-n-max values, comma-separated")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--python", default=sys.executable, help="the converter's interpreter")
    args = ap.parse_args()

    drafts = named(args.draft, "--draft")
    aux = named(args.aux_ids, "--aux-ids")
    for name in [*aux, *args.nest, *args.fresh]:
        if name not in drafts:
            fail(f"{name!r} is not a --draft variant")
    binary = args.bin / "llama-server"
    if not binary.is_file():
        fail(f"{binary}: no llama-server")
    prompts = json.loads(args.prompts.read_text())["prompts"]
    ks = [int(x) for x in args.k.split(",")]
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    runs: dict = {"k": ks, "max_tokens": args.max_tokens, "variants": {}, "seconds": {}}
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    t0 = time.monotonic()
    target = out / "target.gguf"
    convert(
        args.python,
        args.src,
        [str(args.target), "--outtype", "f32", "--outfile", str(target)],
        out / "target.convert.log",
    )
    runs["seconds"]["convert target"] = round(time.monotonic() - t0, 1)
    with tempfile.TemporaryDirectory(prefix="eagle-llamacpp-") as tmp:
        for name, folder in drafts.items():
            src = Path(folder)
            if name in aux or name in args.nest:
                copy = Path(tmp) / name
                shutil.copytree(src, copy)
                cfg = json.loads((copy / "config.json").read_text())
                if name in aux:
                    cfg["eagle_aux_hidden_state_layer_ids"] = [int(x) for x in aux[name].split(",")]
                if name in args.nest:
                    ids = cfg.pop("eagle_aux_hidden_state_layer_ids", None)
                    cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": ids}
                (copy / "config.json").write_text(json.dumps(cfg, indent=2))
                src = copy
            gguf = out / f"{name}.gguf"
            t = time.monotonic()
            convert(
                args.python,
                args.src,
                [str(src), "--target-model-dir", str(args.target), "--outtype", "f32"]
                + ["--outfile", str(gguf)],
                out / f"{name}.convert.log",
            )
            shutil.copy(src / "config.json", out / f"{name}.config.json")
            runs["variants"][name] = {
                "folder": folder,
                "aux_ids": aux.get(name),
                "nested": name in args.nest,
                "fresh_server_per_request": name in args.fresh,
            }
            runs["seconds"][f"convert {name}"] = round(time.monotonic() - t, 1)
            for k in ks:
                t = time.monotonic()
                serve(
                    binary,
                    target,
                    gguf,
                    k,
                    prompts,
                    args.max_tokens,
                    out / f"{name}-k{k}",
                    name in args.fresh,
                )
                runs["seconds"][f"{name}-k{k}"] = round(time.monotonic() - t, 1)
                print(f"run_llamacpp.py: {name} k={k}: {runs['seconds'][f'{name}-k{k}']} s")
    (out / "runs.json").write_text(json.dumps(runs, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
