"""Several runs of one draft (`doctor.reconcile.runs`): the demo's real engine logs
(assets/demo/engine-logs, the copy deployed with ids [2, 4, 6]) given twice, one copy with its
accepted counts cut and its start-up lines naming another backend or build, are told apart: the
altered run departs from the replay of the same requests while the real one equals it, so the
altered run's backend or build is named, never the draft (llama.cpp issue #26750: CUDA against
Vulkan on one build). Two honest copies blame nothing, and logs of two engines are refused.

The drift model is `blame`'s: within 8% of the replay's accept length is equal; a departure is
more than 8% below and short by at least 5 accepted tokens over the replay's rounds."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from inspector.cli import main  # noqa: E402
from inspector.commands.exit_codes import ExitCode  # noqa: E402
from inspector.demo_paths import default_demo_root  # noqa: E402
from inspector.formats.engine_log import read_engine_log  # noqa: E402

DEMO = default_demo_root()
LOGS = DEMO / "engine-logs"
BUILD = (
    "0.00.000.970 I common_params_print_info: build 7000 (0c1e5709) with cc (GCC) 13.2 for x86_64"
)
DEVICE = "0.00.012.000 I llama_model_load_from_file_impl: using device {dev}0 (GPU) (0000:01:00.0) - 15000 MiB free"


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    """The demo target's own continuations of the 8 prompts, 128 tokens each: the requests the
    real logs served."""
    from support import capture_generated

    return capture_generated(tmp_path_factory.mktemp("gen") / "gen", 128)


@pytest.fixture(scope="module")
def deployed(tmp_path_factory) -> Path:
    """The demo draft with the config the engines served (ids [2, 4, 6])."""
    out = tmp_path_factory.mktemp("deployed") / "deployed"
    shutil.copytree(DEMO / "draft", out)
    shutil.copy(LOGS / "deployed-config.json", out / "config.json")
    return out


def _runs(capsys, deployed: Path, samples: Path, *logs: Path) -> tuple[int, dict]:
    capsys.readouterr()
    argv = ["reconcile", str(deployed), str(samples)]
    for log in logs:
        argv += ["--engine-log", str(log)]
    rc = main([*argv, "--json", "--device", "cpu"])
    return rc, json.loads(capsys.readouterr().out)


def _vllm_cut(path: Path, version: str, device: str, accepted: int) -> Path:
    """The real vLLM log with its build and device changed and its one metrics line's accepted
    tokens set to `accepted` (the mean and per-position rates written to agree)."""
    text = (LOGS / "vllm-deployed-k3.log").read_text()
    text = text.replace("(v0.32.0)", f"(v{version})").replace(
        "device_config=cpu", f"device_config={device}"
    )
    m = re.search(r"Accepted: (\d+) tokens, Drafted: (\d+) tokens", text)
    assert m is not None
    drafts = int(m[2]) // 3
    text = re.sub(
        r"Mean acceptance length: [0-9.]+",
        f"Mean acceptance length: {1 + accepted / drafts:.2f}",
        text,
    )
    text = text.replace(m[0], f"Accepted: {accepted} tokens, Drafted: {m[2]} tokens")
    text = re.sub(
        r"Per-position acceptance rate: [0-9., ]*?, Avg",
        f"Per-position acceptance rate: {accepted / drafts:.3f}, 0.000, 0.000, Avg",
        text,
    )
    path.write_text(text)
    return path


def _llama(path: Path, device: str, cut: int = 1) -> Path:
    """The real llama-server log (a fresh server per request) with a build line and the device
    its model loaded on after each start-up; `cut` > 1 divides every request's accepted tokens
    (its statistics line and its slot lines, written to agree)."""
    out = []
    for ln in (LOGS / "llamacpp-deployed-k3.log").read_text().splitlines():
        if cut > 1 and "#gen drafts =" in ln:
            n = int(re.search(r"#gen drafts =\s*(\d+)", ln)[1])
            a = int(re.search(r"#acc tokens =\s*(\d+)", ln)[1]) // cut
            ln = re.sub(r"#acc drafts =\s*\d+", f"#acc drafts = {a:5d}", ln)
            ln = re.sub(r"#acc tokens =\s*\d+", f"#acc tokens = {a:5d}", ln)
            ln = re.sub(r"#mean acc len = [0-9.]+", f"#mean acc len = {1 + a / n:4.2f}", ln)
            ln = re.sub(r"#acc rate/pos = \([^)]*\)", f"#acc rate/pos = ({a / n:.3f})", ln)
            # the request's slot lines, printed just before: the same counts
            gen = int(re.search(r"#gen tokens =\s*(\d+)", ln)[1])
            head = out[-2][: out[-2].index("draft acceptance")]
            out[-2] = head + (
                f"draft acceptance = {a / gen:0.5f} ({a:5d} accepted / {gen:5d} generated), "
                f"mean len = {1 + a / n:5.2f}"
            )
            head = out[-1][: out[-1].index("acc per pos")]
            out[-1] = head + f"acc per pos = ({a / n:.3f}, 0.000, 0.000)"
        out.append(ln)
        if "llama_server: initializing" in ln:
            out += [BUILD, DEVICE.format(dev=device)]
    path.write_text("\n".join(out) + "\n")
    return path


def test_the_runs_are_labelled_by_the_build_and_backend_their_lines_state(tmp_path):
    cuda = read_engine_log(_llama(tmp_path / "cuda.log", "CUDA", cut=6))
    vulkan = read_engine_log(_llama(tmp_path / "vulkan.log", "Vulkan"))
    assert cuda.start is not None and vulkan.start is not None
    assert cuda.start.label == "llama.cpp b7000 (0c1e5709) on CUDA"
    assert vulkan.start.label == "llama.cpp b7000 (0c1e5709) on Vulkan"
    assert len(vulkan.starts) == 8  # a fresh server per request, each stating its build
    # the real log's counts (881 rounds, 127 accepted), and the cut copy's, from the statistics
    assert (vulkan.rounds, vulkan.accepted) == (881, 127)
    assert cuda.rounds == 881 and cuda.accepted == sum(
        int(x) // 6
        for x in re.findall(
            r"#acc tokens =\s*(\d+)", (LOGS / "llamacpp-deployed-k3.log").read_text()
        )
    )
    assert [r.accepted for r in cuda.slot_requests] == [
        a // 6 for a in (r.accepted for r in vulkan.slot_requests)
    ]
    vllm = read_engine_log(LOGS / "vllm-deployed-k3.log")
    assert vllm.start is not None and vllm.start.label == "vLLM 0.32.0 on cpu"


def test_a_vllm_build_that_departs_while_another_equals_the_replay_is_named(
    capsys, tmp_path, generated, deployed
):
    real = shutil.copy(LOGS / "vllm-deployed-k3.log", tmp_path / "cpu.log")
    cut = _vllm_cut(tmp_path / "cuda.log", "0.33.0", "cuda", 107)
    rc, doc = _runs(capsys, deployed, generated, Path(real), cut)
    assert rc == ExitCode.PROBLEM
    first, second = doc["runs"]
    assert first["run"] == "vLLM 0.32.0 on cpu" and second["run"] == "vLLM 0.33.0 on cuda"
    # the real run is what the draft gives fed the layers its config names: its own verdict
    assert first["verdict"] == "wrong_wiring" and first["blame"] is None
    assert second["verdict"] == "engine_backend", second["summary"]
    blame = second["blame"]
    assert (blame["side"], blame["kind"], blame["run"]) == (
        "engine",
        "backend",
        "vLLM 0.33.0 on cuda",
    )
    assert blame["wiring"] == "configured [L2, L4, L6]"
    runs = {c["run"]: c for c in blame["runs"]}
    good, bad = runs["vLLM 0.32.0 on cpu"], runs["vLLM 0.33.0 on cuda"]
    # 214 accepted in 802 rounds against 107: accept lengths, counted
    assert good["engine_accept_length"] == pytest.approx(1 + 214 / 802, abs=1e-12)
    assert good["replay_accept_length"] == pytest.approx(1 + 214 / 802, abs=1e-12)
    assert good["equal"] and not good["departs"]
    assert bad["engine_accept_length"] == pytest.approx(1 + 107 / 802, abs=1e-12)
    assert bad["short"] == pytest.approx(107, abs=1e-9) and bad["departs"]
    assert "vLLM 0.33.0 on cuda departs from this draft's replay" in second["summary"]
    assert "while vLLM 0.32.0 on cpu (cpu.log) logged 1.27" in second["summary"]
    assert "not the draft's wiring or weights" in second["summary"]
    assert "backend or build" in second["engine_fault_classes"][0]
    across = doc["across_runs"]
    assert across["departing"] == ["vLLM 0.33.0 on cuda"]
    assert across["wiring"] == "configured [L2, L4, L6]"


def test_a_llama_cpp_backend_that_departs_is_named_with_the_issue(
    capsys, tmp_path, generated, deployed
):
    """#26750's shape: one build, Vulkan equals the replay of [L2, L4, nothing] (881 / 127),
    CUDA accepts a sixth of it."""
    vulkan = _llama(tmp_path / "vulkan.log", "Vulkan")
    cuda = _llama(tmp_path / "cuda.log", "CUDA", cut=6)
    rc, doc = _runs(capsys, deployed, generated, cuda, vulkan)
    assert rc == ExitCode.PROBLEM
    bad, good = doc["runs"]
    assert good["verdict"] == "wrong_wiring" and good["matched"].endswith("[L2, L4, nothing]")
    assert bad["verdict"] == "engine_backend", bad["summary"]
    assert bad["blame"]["run"] == "llama.cpp b7000 (0c1e5709) on CUDA"
    assert bad["blame"]["wiring"].endswith("[L2, L4, nothing]")
    checks = {c["run"]: c for c in bad["blame"]["runs"]}
    c = checks["llama.cpp b7000 (0c1e5709) on CUDA"]
    log = read_engine_log(cuda)
    assert c["engine_accept_length"] == pytest.approx(1 + log.accepted / 881, abs=1e-12)
    assert c["replay_accept_length"] == pytest.approx(1 + 127 / 881, abs=1e-12)
    assert c["short"] == pytest.approx(127 - log.accepted, abs=1e-9) and c["departs"]
    assert checks["llama.cpp b7000 (0c1e5709) on Vulkan"]["equal"]
    assert any("#26750" in f for f in bad["engine_fault_classes"])


def test_two_honest_runs_blame_nothing_and_two_engines_are_refused(
    capsys, tmp_path, generated, deployed
):
    a = shutil.copy(LOGS / "vllm-deployed-k3.log", tmp_path / "a.log")
    b = _vllm_cut(tmp_path / "b.log", "0.33.0", "cuda", 214)  # another build, the same counts
    rc, doc = _runs(capsys, deployed, generated, Path(a), b)
    assert [r["verdict"] for r in doc["runs"]] == ["wrong_wiring", "wrong_wiring"]
    assert doc["across_runs"] is None and rc == ExitCode.PROBLEM  # the wrong wiring, not a run
    llama = _llama(tmp_path / "llama.log", "CUDA")
    capsys.readouterr()
    argv = ["reconcile", str(deployed), str(generated), "--engine-log", str(a)]
    assert main([*argv, "--engine-log", str(llama), "--device", "cpu"]) == ExitCode.BAD_INPUT
    assert "the logs are vLLM and llama.cpp's" in capsys.readouterr().err


def _sglang_lines(path: Path, values: list[str]) -> Path:
    """SGLang's decode lines, one a window (cuda graph: a GPU run), at these accept lens."""
    path.write_text(
        "\n".join(
            f"[2026-12-01 16:30:{i:02d}] Decode batch, #running-req: 1, #token: 900, token usage: "
            f"0.01, accept len: {v}, accept rate: 0.00, cuda graph: True, gen throughput "
            "(token/s): 300.10, #queue-req: 0"
            for i, v in enumerate(values)
        )
        + "\n"
    )
    return path


@pytest.fixture(scope="module")
def hc_samples(tmp_path_factory, generated) -> Path:
    """The same samples, their data_config.json recording the target's config with
    hyper-connections declared (hc_mult = 4, as GLM-5.3-Flash's)."""
    out = tmp_path_factory.mktemp("hc") / "samples"
    shutil.copytree(generated, out)
    cfg = json.loads((DEMO / "target" / "config.json").read_text())
    data = json.loads((out / "data_config.json").read_text())
    data["target"] = {**cfg, "hc_mult": 4}
    (out / "data_config.json").write_text(json.dumps(data))
    return out


def test_a_hyper_connection_target_at_accept_length_one_names_the_targets_state(
    capsys, tmp_path, generated, hc_samples
):
    from support import reconcile_json

    log = _sglang_lines(tmp_path / "sglang.log", ["1.00", "1.01", "1.00", "1.00"])
    r = reconcile_json(capsys, hc_samples, log)
    assert r["verdict"] == "target_hidden_state", r["summary"]
    blame = r["blame"]
    assert (blame["side"], blame["kind"], blame["hc_mult"]) == ("target", "hidden_state", 4)
    trained = next(w for w in r["wirings"] if w["label"] == r["best"])
    assert blame["wiring"] == r["best"] and trained["accept_length"] > 1.5
    assert "hc_mult = 4" in r["summary"] and "data_config.json: target.hc_mult" in r["summary"]
    assert "not the draft's wiring or weights" in r["summary"]
    assert any("#36829" in f and "SGLang" in f for f in r["engine_fault_classes"])
    # the same log on a target without hyper-connections: an engine-side fault, no state named
    plain = reconcile_json(capsys, generated, log)
    assert plain["verdict"] == "engine_fault" and plain["blame"] is None
    # a figure well above 1.0 on the hyper-connection target is not the pattern
    above = _sglang_lines(tmp_path / "above.log", ["1.40", "1.40"])
    assert reconcile_json(capsys, hc_samples, above)["verdict"] != "target_hidden_state"
