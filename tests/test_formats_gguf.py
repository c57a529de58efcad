"""llama.cpp EAGLE-3 GGUFs (arch `eagle3`) load into the HF draft's canonical Draft.

The GGUFs are written from the bundled demo draft by `write_eagle3_gguf` (tests/gguf_writer.py),
which mirrors llama.cpp's converter for exactly these tensors and keys with gguf's own
GGUFWriter; `CONVERTER_KEYS` and `CONVERTER_TENSORS` are what the real converter (llama.cpp@0c1e57098, `convert_hf_to_gguf.py`)
wrote for the same draft, and the helper is held to them. (Run by hand on the demo at --outtype
f32, f16, bf16 and q8_0, and with llama3 and yarn RoPE, the converter's tensors were
byte-identical to the helper's, and its keys but the tokenizer's equal in order, type and value,
general.name aside, which the converter takes from the folder's name.)
"""

from __future__ import annotations

import hashlib
import itertools
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf_writer import DRAFT, HELD, TARGET, Q, converter_permute, write_eagle3_gguf
from safetensors.torch import load_file
from support import edited_copy, error_lines

from inspector.cli import main
from inspector.errors import InputError
from inspector.formats import SampleSet, load_draft
from inspector.formats.gguf_rope import converter_llama3_factors
from inspector.formats.gguf_tensors import unpermute
from inspector.model import fc_input, fc_project, forward_steps, iter_steps
from inspector.model.rope import rms_norm

gguf = pytest.importorskip("gguf")

pytestmark = pytest.mark.usefixtures("one_thread")

# What llama.cpp's convert_hf_to_gguf.py (llama.cpp@0c1e57098, as llama-cpp-python 0.3.36 vendors
# it) wrote for the demo draft with --target-model-dir assets/demo/target: every key but the
# tokenizer's (taken from the target, not read by the loader), with its GGUF type ...
CONVERTER_KEYS = {
    "general.architecture": "STRING",
    "eagle3.target_layers": "ARRAY[INT32]",
    "eagle3.target_hidden_size": "UINT32",
    "eagle3.norm_before_residual": "BOOL",
    "eagle3.norm_before_fc": "BOOL",
    "general.type": "STRING",
    "general.name": "STRING",
    "general.size_label": "STRING",
    "eagle3.block_count": "UINT32",
    "eagle3.context_length": "UINT32",
    "eagle3.embedding_length": "UINT32",
    "eagle3.feed_forward_length": "UINT32",
    "eagle3.attention.head_count": "UINT32",
    "eagle3.attention.head_count_kv": "UINT32",
    "eagle3.rope.freq_base": "FLOAT32",
    "eagle3.attention.layer_norm_rms_epsilon": "FLOAT32",
    "eagle3.attention.key_length": "UINT32",
    "eagle3.attention.value_length": "UINT32",
    "general.file_type": "UINT32",
    "eagle3.vocab_size": "UINT32",
    "eagle3.rope.dimension_count": "UINT32",
    "general.quantization_version": "UINT32",
}
# ... and every tensor, its type under --outtype f32 / q8_0, and its shape as gguf-dump prints it.
CONVERTER_TENSORS = [
    ("token_embd.weight", "F32", "Q8_0", [128, 512]),
    ("fc.weight", "F32", "Q8_0", [384, 128]),
    ("blk.0.attn_norm_2.weight", "F32", "F32", [128]),
    ("blk.0.attn_norm.weight", "F32", "F32", [128]),
    ("blk.0.ffn_down.weight", "F32", "Q8_0", [384, 128]),
    ("blk.0.ffn_gate.weight", "F32", "Q8_0", [128, 384]),
    ("blk.0.ffn_up.weight", "F32", "Q8_0", [128, 384]),
    ("blk.0.ffn_norm.weight", "F32", "F32", [128]),
    ("blk.0.attn_k.weight", "F32", "Q8_0", [256, 64]),
    ("blk.0.attn_output.weight", "F32", "Q8_0", [128, 128]),
    ("blk.0.attn_q.weight", "F32", "Q8_0", [256, 128]),
    ("blk.0.attn_v.weight", "F32", "Q8_0", [256, 64]),
    ("output.weight", "F32", "Q8_0", [128, 256]),
    ("output_norm.weight", "F32", "F32", [128]),
    ("d2t", "I64", "I64", [256]),
]


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gguf")
    kinds = {"F32": Q.F32, "F16": Q.F16, "BF16": Q.BF16, "Q8_0": Q.Q8_0}
    return {k: write_eagle3_gguf(root / f"demo-{k.lower()}.gguf", q) for k, q in kinds.items()}


@pytest.fixture(scope="module")
def hf():
    return load_draft(DRAFT)


def _type_name(field) -> str:
    names = [t.name for t in field.types]
    return f"ARRAY[{names[-1]}]" if names[0] == "ARRAY" else names[0]


@pytest.mark.parametrize("kind,col", [("F32", 1), ("Q8_0", 2)])
def test_the_helper_writes_what_llama_cpps_converter_writes(ggufs, kind, col):
    r = gguf.GGUFReader(ggufs[kind])
    keys = {k: _type_name(f) for k, f in r.fields.items() if not k.startswith("GGUF.")}
    assert keys == CONVERTER_KEYS
    got = [(t.name, t.tensor_type.name, [int(n) for n in t.shape]) for t in r.tensors]
    assert got == [(row[0], row[col], row[3]) for row in CONVERTER_TENSORS]
    d2t = next(t for t in r.tensors if t.name == "d2t").data
    offsets = load_file(str(DRAFT / "model.safetensors"))["d2t"].numpy()
    assert np.array_equal(d2t, offsets + np.arange(offsets.size))  # absolute ids


def test_unpermute_inverts_the_converters_permute():
    for heads, kv in ((8, 8), (8, 2)):  # Q (kv = heads), and K of a GQA draft
        x = np.arange(kv * 32 * 3, dtype=np.float32).reshape(kv * 32, 3)
        permuted = converter_permute(x, heads, kv)
        assert not np.array_equal(permuted, x)
        assert torch.equal(unpermute(torch.from_numpy(permuted.copy()), kv), torch.from_numpy(x))


def _step_logits(draft, sample, steps=3):
    """Logits of TTT steps 0..steps-1, fc fed the slots the demo draft was trained on."""
    slots = [sample.slots[j].to(draft.dtype) for j in (0, 1, 2)]
    h = fc_project(draft, fc_input(draft, slots))[:-1]
    return forward_steps(draft, h, sample.input_ids[1:], steps=steps, position_offset=1)


@pytest.fixture(scope="module")
def held():
    samples = SampleSet(HELD)
    return [samples[i] for i in (0, 7, 21, 40)]


def test_f32_gguf_is_the_hf_draft(ggufs, hf, held):
    g = load_draft(ggufs["F32"])
    assert g.layout == "gguf" and g.path == str(ggufs["F32"]) and g.name == "demo-f32.gguf"
    assert g.stored_dtype == torch.float32 and g.dtype_note is None
    for f in g.config.__dataclass_fields__:
        if f not in ("aux_layer_convention", "source_format"):
            assert getattr(g.config, f) == getattr(hf.config, f), f
    assert g.config.aux_layer_ids == (0, 2, 4) and g.config.aux_layer_convention == "llama.cpp"
    assert g.config.rms_norm_eps == 1e-05  # the float32 key read back as the decimal written
    assert set(g.weights) == set(hf.weights)
    for name, w in hf.weights.items():
        assert torch.equal(g.weights[name], w), name
    assert torch.equal(g.vocab.d2t, hf.vocab.d2t) and torch.equal(g.vocab.t2d, hf.vocab.t2d)
    assert torch.equal(g.stored_vocab.d2t, hf.vocab.d2t) and g.stored_vocab.t2d is None
    for sample in held:
        for a, b in zip(_step_logits(g, sample), _step_logits(hf, sample), strict=True):
            assert torch.equal(a, b)


# Rounding model for the half and 8-bit files. A weight w stored as w(1 + d) with |d| <= u moves a
# dot product sum_i w_i x_i by at most u * sum_i |w_i x_i|. u is the format's relative half-ulp:
# float16 2^-11, bfloat16 2^-8. Q8_0 rounds x/scale to an integer, the scale amax/127 of each block
# of 32 stored in float16: an absolute error of at most amax/254, so |d| <= 3/254 for a weight at
# or above a third of its block's largest (the typical Gaussian weight: E|w| ~ amax/2.6 in a block
# of 32), plus the scale's 2^-11. The logits come through a chain of L = 6 such products (fc,
# q/k/v, o, gate/up, down, lm_head), the RMS norms between them rescaling every relative change to
# first order; so, to first order, each logit moves by at most L * u * A, where A = max_j sum_i
# |lm_head_ji * x_i| is the lm_head's accumulated dot product over the HF draft's normed final
# state x. Measured over all 48 held samples: 15 % of the bound for float16 and bfloat16, 18 %
# for Q8_0 (the errors do not line up as the bound lets them).
U = {"F16": 2.0**-11, "BF16": 2.0**-8, "Q8_0": 3 / 254 + 2.0**-11}
CHAIN = 6


def _accumulated(hf, sample) -> float:
    """A: the largest sum_i |lm_head_ji x_i| over the sample's step-0 rows, x the normed final
    state the HF draft feeds its head."""
    h = fc_project(hf, fc_input(hf, [sample.slots[j].to(hf.dtype) for j in (0, 1, 2)]))[:-1]
    _, z = next(iter_steps(hf, h, sample.input_ids[1:], steps=1, position_offset=1))
    x = rms_norm(z, hf.weights["norm.weight"], hf.config.rms_norm_eps)
    return float((x.abs() @ hf.weights["lm_head.weight"].abs().T).max())


@pytest.mark.parametrize("kind", ["F16", "BF16", "Q8_0"])
def test_half_and_8bit_ggufs_stay_within_their_rounding(ggufs, hf, held, kind):
    g = load_draft(ggufs[kind])
    assert g.dtype == torch.float32  # computed in float32 on the CPU, whatever the file holds
    if kind == "Q8_0":
        assert g.stored_dtype == torch.float32 and "Q8_0" in (g.dtype_note or "")
    else:
        assert g.stored_dtype == {"F16": torch.float16, "BF16": torch.bfloat16}[kind]
    worst = 0.0
    for sample in held:
        tol = CHAIN * U[kind] * _accumulated(hf, sample)
        got, ref = _step_logits(g, sample, steps=1)[0], _step_logits(hf, sample, steps=1)[0]
        d = float((got - ref).abs().max())
        assert 0 < d <= tol, (kind, d, tol)
        worst = max(worst, d)
    print(f"{kind}: max |d| {worst:.3g}")


# --- eval through the CLI ---------------------------------------------------------------------------


def _eval_json(capsys, ckpt: Path) -> dict:
    argv = ["eval", str(ckpt), str(HELD), "--json", "--ttt-steps", "3", "--device", "cpu"]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_eval_of_the_f32_gguf_gives_the_hf_folders_figures(ggufs, capsys):
    hf_doc, g_doc = _eval_json(capsys, DRAFT), _eval_json(capsys, ggufs["F32"])
    assert g_doc["checkpoint"] == str(ggufs["F32"]) and g_doc["layout"] == "gguf"
    assert g_doc["samples"] == 48
    for doc in (hf_doc, g_doc):
        del doc["checkpoint"], doc["layout"]
    assert g_doc == hf_doc
    assert main(["eval", str(ggufs["F32"]), str(HELD), "--limit", "2"]) == 0
    out = capsys.readouterr().out
    assert "demo-f32.gguf (gguf) on 2 samples" in " ".join(out.split())


def test_eval_of_a_broken_gguf_is_one_line_exit_2(tmp_path, capsys):
    bad = write_eagle3_gguf(tmp_path / "bad.gguf", keys={"eagle3.target_layers": None})
    assert main(["eval", str(bad), str(HELD)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(error_lines(err)) == 1 and "eagle3.target_layers" in err and "bad.gguf" in err


# --- variants the converter writes ------------------------------------------------------------------


def _same_logits(a, b, held) -> None:
    for sample in held[:2]:
        for x, y in zip(_step_logits(a, sample), _step_logits(b, sample), strict=True):
            assert torch.equal(x, y)


@pytest.mark.parametrize(
    "rope",
    [
        {
            "rope_type": "llama3",
            "rope_theta": 10000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        {"rope_type": "linear", "rope_theta": 20000.0, "factor": 2.0},
        {
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 128,
        },
    ],
)
def test_rope_scaling_comes_back(tmp_path, held, rope):
    """llama3 reaches the GGUF only as rope_freqs.weight (the converter's per-pair factors):
    the rope_scaling that gives them is recovered; linear and yarn are keys."""

    def edit(cfg):
        cfg["transformer_layer_config"]["rope_parameters"] = rope

    folder = edited_copy(DRAFT, tmp_path / "draft", config=edit)
    g = load_draft(write_eagle3_gguf(tmp_path / "d.gguf", draft=folder))
    hf = load_draft(folder)
    assert g.config.rope == hf.config.rope and g.config.rope.rope_type == rope["rope_type"]
    _same_logits(g, hf, held)


def test_factors_no_llama3_scaling_gives_are_refused(tmp_path):
    def odd(items):
        factors = converter_llama3_factors(10000.0, 32, 8.0, 1.0, 4.0, 8192).numpy()
        factors[3] = 2.0  # a fast pair scaled while slower ones are not: no llama3 does that
        return [("rope_freqs.weight", factors, Q.F32), *items]

    path = write_eagle3_gguf(tmp_path / "d.gguf", tensors=odd)
    with pytest.raises(InputError, match=r"rope_freqs\.weight: per-frequency factors"):
        load_draft(path)


def test_earlier_names_of_the_ids_and_the_hidden_norm(tmp_path, hf, held):
    """Other versions of PR #18039's code (and forks on them) name the ids
    eagle3.extract_layers and the hidden norm blk.0.hidden_norm.weight."""

    def rename(items):
        return [(n.replace("attn_norm_2", "hidden_norm"), d, k) for n, d, k in items]

    ids = {"eagle3.target_layers": None, "eagle3.extract_layers": ("ARRAY[INT32]", [0, 2, 4])}
    g = load_draft(write_eagle3_gguf(tmp_path / "d.gguf", keys=ids, tensors=rename))
    assert g.config.aux_layer_ids == (0, 2, 4)
    _same_logits(g, hf, held)


def test_fork_flags_and_tensors(tmp_path):
    """The forks' eagle3.fc_norm (per-slot fc_norm.{k}.weight), eagle3.norm_output, and
    upstream's norm_before_fc (enc.output_norm.weight)."""
    ones = np.ones(128, dtype=np.float32)

    def add(items):
        extra = [(f"fc_norm.{k}.weight", ones * (k + 1), Q.F32) for k in range(3)]
        extra.append(("enc.output_norm.weight", np.ones(384, dtype=np.float32), Q.F32))
        return [*items, *extra]

    flags = {k: ("BOOL", True) for k in ("eagle3.fc_norm", "eagle3.norm_output")}
    flags["eagle3.norm_before_fc"] = ("BOOL", True)
    g = load_draft(write_eagle3_gguf(tmp_path / "d.gguf", keys=flags, tensors=add))
    cfg = g.config
    assert cfg.fc_norm and cfg.norm_output and cfg.norm_before_fc
    assert torch.equal(g.weights["fc_norm.2.weight"], torch.full((128,), 3.0))
    assert torch.equal(g.weights["input_norm.weight"], torch.ones(384))
    # the tensors without their flags: llama.cpp would not read them
    with pytest.raises(InputError, match=r"fc_norm\.0\.weight: present but eagle3\.fc_norm"):
        load_draft(write_eagle3_gguf(tmp_path / "e.gguf", tensors=add))


def test_head_and_embedding_from_the_target(tmp_path, hf):
    """No output.weight / token_embd.weight: llama.cpp uses the target's; here --target."""

    def drop(items):
        return [it for it in items if it[0] not in ("output.weight", "token_embd.weight")]

    path = write_eagle3_gguf(tmp_path / "d.gguf", tensors=drop)
    with pytest.raises(InputError, match=r"output\.weight: absent .*pass --target DIR"):
        load_draft(path)
    g = load_draft(path, target=TARGET)
    target = load_file(str(TARGET / "model.safetensors"))
    ids = hf.vocab.draft_to_target
    assert torch.equal(g.weights["lm_head.weight"], target["lm_head.weight"][ids])
    assert torch.equal(g.weights["embed_tokens.weight"], target["model.embed_tokens.weight"])
    assert any("lm_head" in n for n in g.notes)

    def drop_embed(items):
        return [it for it in items if it[0] != "token_embd.weight"]

    path = write_eagle3_gguf(tmp_path / "e.gguf", tensors=drop_embed)
    with pytest.raises(InputError, match=r"token_embd\.weight: absent .*--target DIR or --embed"):
        load_draft(path)


# --- refusals: one line naming the file and the key or tensor ----------------------------------------


def _refusal(path: Path, **kw) -> str:
    with pytest.raises(InputError) as e:
        load_draft(path, **kw)
    text = str(e.value)
    assert "\n" not in text and text.startswith(str(path) + ": ")
    return text


def test_a_truncated_file_names_where_it_ends(ggufs, tmp_path):
    data = ggufs["F32"].read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) - 5000])  # inside the last tensors' data
    text = _refusal(cut)
    assert "truncated: its data ends at byte" in text
    name = text.split(": ")[1]
    assert name in {row[0] for row in CONVERTER_TENSORS}
    cut.write_bytes(data[:300])  # inside the metadata
    assert "truncated: the file (300 bytes) ends in the metadata, after this key" in _refusal(cut)
    cut.write_bytes(b"")
    assert "not a readable GGUF file" in _refusal(cut)
    cut.write_bytes(b"GGUX" + data[4:])
    assert "not a readable GGUF file: GGUF magic invalid" in _refusal(cut)


def test_refusals(tmp_path):
    cases = [
        ({"keys": {"eagle3.target_layers": None}}, "eagle3.target_layers: missing"),
        ({"keys": {"eagle3.embedding_length": None}}, "eagle3.embedding_length: missing"),
        ({"arch": "llama"}, "general.architecture: 'llama': not an EAGLE-3 draft"),
        ({"keys": {"eagle3.block_count": ("UINT32", 2)}}, "eagle3.block_count: 2: llama.cpp"),
        (
            {"keys": {"eagle3.target_layers": ("ARRAY[INT32]", [0, 2])}},
            "fc.weight: shape (128, 384), expected (128, 256)",
        ),
        (
            {"keys": {"eagle3.norm_before_residual": ("UINT32", 1)}},
            "eagle3.norm_before_residual: expected true or false",
        ),
        (
            {"keys": {"eagle3.rope.dimension_count": ("UINT32", 16)}},
            "eagle3.rope.dimension_count: 16, but head_dim is 32",
        ),
    ]
    for i, (kw, message) in enumerate(cases):
        path = write_eagle3_gguf(tmp_path / f"c{i}.gguf", **kw)
        assert message in _refusal(path), kw


def _edit(name, fn):
    def edit(items):
        return [(n, fn(d) if n == name else d, k) for n, d, k in items]

    return edit


def test_tensor_refusals(tmp_path):
    def dup(ids):
        ids = ids.copy()
        ids[1] = ids[0]
        return ids

    cases = [
        (
            _edit("blk.0.ffn_up.weight", lambda d: d[:-1]),
            "blk.0.ffn_up.weight: shape (383, 128), expected (384, 128)",
        ),
        (_edit("d2t", dup), "d2t: holds 1 repeated target ids"),
        (_edit("d2t", lambda d: d[::-1].copy()), "d2t: target ids not in ascending order"),
        (
            lambda items: [*items, ("blk.0.attn_q.bias", np.zeros(128, np.float32), Q.F32)],
            "blk.0.attn_q.bias: not a tensor of llama.cpp's eagle3 draft",
        ),
        (
            lambda items: [it for it in items if it[0] != "blk.0.attn_norm_2.weight"],
            "blk.0.attn_norm_2.weight: tensor not found",
        ),
        (
            _edit("blk.0.ffn_norm.weight", lambda d: np.full_like(d, np.nan)),
            "blk.0.ffn_norm.weight: contains NaN or Inf",
        ),
    ]
    for i, (edit, message) in enumerate(cases):
        path = write_eagle3_gguf(tmp_path / f"t{i}.gguf", tensors=edit)
        assert message in _refusal(path), message


def test_without_the_gguf_package_one_line_says_what_to_install(ggufs, monkeypatch):
    monkeypatch.setitem(sys.modules, "gguf", None)
    text = _refusal(ggufs["F32"])
    assert text.endswith("needs the gguf package: pip install 'eagle3-inspector[gguf]'")


def test_the_file_is_not_modified(ggufs):
    before = hashlib.sha256(ggufs["Q8_0"].read_bytes()).hexdigest()
    mtime = ggufs["Q8_0"].stat().st_mtime_ns
    load_draft(ggufs["Q8_0"])
    assert hashlib.sha256(ggufs["Q8_0"].read_bytes()).hexdigest() == before
    assert ggufs["Q8_0"].stat().st_mtime_ns == mtime


@pytest.mark.parametrize("theta,dim", [(10000.0, 32), (500000.0, 128), (1e6, 64)])
def test_llama3_scaling_from_the_converters_factors(theta, dim):
    """Every llama3 setting of a grid comes back as one that gives the same RoPE frequencies
    (to the 1e-5 the match allows); Llama 3.1's and 3.2's (factor 8 / 32, low 1, high 4,
    context 8192) exactly."""
    from inspector.draft import RopeConfig
    from inspector.formats.gguf_rope import llama3_from_factors
    from inspector.model.rope import rope_inv_freq

    for factor, low, high, ctx in itertools.product(
        (2.0, 8.0, 32.0), (1.0, 1.5, 2.0), (3.0, 4.0, 8.0), (64, 8192, 131072)
    ):
        stored = converter_llama3_factors(theta, dim, factor, low, high, ctx).double().numpy()
        got = llama3_from_factors(stored, theta, dim)
        assert got is not None, (factor, low, high, ctx)
        want = dict(
            factor=factor,
            low_freq_factor=low,
            high_freq_factor=high,
            original_max_position_embeddings=ctx,
        )
        ref = rope_inv_freq(RopeConfig(theta, "llama3", want), dim)[0]
        mine = rope_inv_freq(RopeConfig(theta, "llama3", got) if got else RopeConfig(theta), dim)[0]
        assert float(((mine - ref) / ref).abs().max()) <= 1e-5
        if (low, high, ctx) == (1.0, 4.0, 8192):
            assert got == want


def test_target_auto_on_a_gguf_asks_for_the_target(ggufs, capsys):
    argv = ["eval", str(ggufs["F32"]), str(HELD), "--target", "auto"]
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--target auto: a GGUF draft names no verifier: pass --target DIR" in err
    argv = ["eval", str(ggufs["F32"]), str(HELD), "--target", str(TARGET), "--json", "--limit", "2"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["verifier"] == str(TARGET)
