"""Property-based fuzzing of the loaders: truncated files, flipped bits, lying headers, huge
declared shapes and config values of every JSON type. Whatever the bytes, a loader returns a
valid object or raises InputError (one line), and never reads more than the file holds.

Bounded: a fixed number of examples per property, derandomized, no example database; the whole
module runs in well under a minute on two cores.
"""

from __future__ import annotations

import json
import math
import resource
import struct
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

from inspector.errors import InputError
from inspector.formats import load_sample
from inspector.formats.config import ROPE_TYPES, parse_draft_config
from inspector.formats.headers import check_torch_zip, safetensors_header
from inspector.formats.tensorfiles import load_torch_file, read_safetensors

FUZZ = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
V = 50


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, bytes]:
    root = tmp_path_factory.mktemp("fuzz")
    g = torch.Generator().manual_seed(0)
    torch.save(
        {
            "input_ids": torch.randint(0, V, (12,), generator=g),
            "hidden_states": [torch.randn(12, 8, generator=g).to(torch.bfloat16) for _ in range(3)],
            "loss_mask": torch.tensor([0] * 4 + [1] * 8),
        },
        root / "s.pt",
    )
    save_file(
        {"a": torch.randn(4, 8, generator=g), "b": torch.arange(6), "c": torch.ones(3).half()},
        str(root / "w.safetensors"),
    )
    return {"pt": (root / "s.pt").read_bytes(), "st": (root / "w.safetensors").read_bytes()}


@pytest.fixture(scope="module", autouse=True)
def bounded_memory():
    """No example may make the process balloon (a lying header read as data would)."""
    before = _peak_mb()
    yield
    assert _peak_mb() - before < 1024


def _mutations(size: int):
    pos = st.integers(0, max(size - 1, 0))
    return st.one_of(
        st.tuples(st.just("truncate"), st.integers(0, size - 1), st.just(0)),
        st.tuples(st.just("flip"), pos, st.integers(0, 7)),
        st.tuples(st.just("flip3"), pos, st.integers(0, 2**24 - 1)),
        st.tuples(st.just("huge"), pos, st.sampled_from([2**31 - 1, 2**32 - 1, 2**63 - 1])),
    )


def _mutate(data: bytes, op: tuple[str, int, int]) -> bytes:
    kind, at, arg = op
    b = bytearray(data)
    at %= len(b)  # positions were drawn for the untruncated file
    if kind == "truncate":
        return bytes(b[:at])
    if kind == "flip":
        b[at] ^= 1 << arg
    elif kind == "flip3":  # three bits in a row of bytes
        for k in range(3):
            if at + k < len(b):
                b[at + k] ^= (arg >> (8 * k)) & 0xFF
    else:  # a lying size: a large little-endian integer written over whatever was there
        raw = struct.pack("<Q", arg)
        b[at : at + 8] = raw[: len(b) - at]
    return bytes(b)


def _loads_or_refuses(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except InputError as e:
        assert "\n" not in str(e) and "weights_only=False" not in str(e)
        return None


@FUZZ
@given(data=st.data())
def test_sample_file_mutations(files, tmp_path_factory, data) -> None:
    raw = files["pt"]
    ops = data.draw(st.lists(_mutations(len(raw)), min_size=1, max_size=3))
    for op in ops:
        raw = _mutate(raw, op) if raw else raw
    path = tmp_path_factory.mktemp("s", numbered=True) / "data_0.pt"
    path.write_bytes(raw)
    sample = _loads_or_refuses(load_sample, path, vocab_size=V)
    if sample is not None:
        assert sample.input_ids.dtype == torch.int64
        assert int(sample.input_ids.min()) >= 0 and int(sample.input_ids.max()) < V
        assert set(sample.loss_mask.tolist()) <= {0, 1}
        assert len({s.shape for s in sample.slots}) == 1


@FUZZ
@given(data=st.data())
def test_torch_zip_pickle_mutations(files, tmp_path_factory, data) -> None:
    """Bit flips aimed at the pickle and the zip directory, where the sizes are declared."""
    raw = bytearray(files["pt"])
    start = raw.index(b"data.pkl") + 8  # the pickle follows its local header's name
    end = len(raw) - 600  # and the central directory fills the end of the file
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.one_of(st.integers(start, start + 200), st.integers(end, len(raw) - 1)))
        raw[at] ^= 1 << data.draw(st.integers(0, 7))
    path = tmp_path_factory.mktemp("z", numbered=True) / "s.pt"
    path.write_bytes(bytes(raw))
    if _loads_or_refuses(check_torch_zip, path) is None and not _checked_ok(path):
        return
    _loads_or_refuses(load_torch_file, path)


def _checked_ok(path: Path) -> bool:
    try:
        check_torch_zip(path)
        return True
    except InputError:
        return False


@FUZZ
@given(data=st.data())
def test_safetensors_mutations(files, tmp_path_factory, data) -> None:
    raw = files["st"]
    for op in data.draw(st.lists(_mutations(len(raw)), min_size=1, max_size=3)):
        raw = _mutate(raw, op) if raw else raw
    path = tmp_path_factory.mktemp("t", numbered=True) / "w.safetensors"
    path.write_bytes(raw)
    headers = _loads_or_refuses(safetensors_header, path)
    if headers is not None:
        size = len(raw)
        assert all(0 <= h.begin <= h.end <= size for h in headers.values())
        tensors = _loads_or_refuses(read_safetensors, path)
        if tensors is not None:
            for name, t in tensors.items():
                assert t.numel() * t.element_size() == headers[name].end - headers[name].begin


_dims = st.one_of(st.integers(0, 8), st.integers(2**31, 2**62), st.integers(-5, -1))


@FUZZ
@given(
    shape=st.lists(_dims, min_size=0, max_size=4),
    begin=st.one_of(st.integers(0, 64), st.integers(2**40, 2**62)),
    length=st.one_of(st.integers(0, 64), st.integers(2**40, 2**62)),
    dtype=st.sampled_from(["F32", "BF16", "I64", "BOOL", "ZZ"]),
)
def test_safetensors_lying_headers(tmp_path_factory, shape, begin, length, dtype) -> None:
    header = {"x": {"dtype": dtype, "shape": shape, "data_offsets": [begin, begin + length]}}
    raw = json.dumps(header).encode()
    path = tmp_path_factory.mktemp("h", numbered=True) / "w.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(64))
    headers = _loads_or_refuses(safetensors_header, path)
    if headers is not None:
        h = headers["x"]
        assert h.end <= path.stat().st_size and min(h.shape, default=0) >= 0
        t = _loads_or_refuses(read_safetensors, path)
        if t is not None:
            assert t["x"].numel() * t["x"].element_size() <= 64


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
_KEYS = [
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "draft_vocab_size",
    "target_hidden_size",
    "num_hidden_layers",
    "rms_norm_eps",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "norm_before_residual",
    "fc_norm",
    "eagle_aux_hidden_state_layer_ids",
    "eagle_config",
    "transformer_layer_config",
]


def _speculators_config() -> dict:
    return {
        "speculators_model_type": "eagle3",
        "draft_vocab_size": 32,
        "eagle_aux_hidden_state_layer_ids": [0, 2, 4],
        "transformer_layer_config": {
            "hidden_size": 64,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "intermediate_size": 128,
            "vocab_size": 256,
            "rope_scaling": {"rope_type": "llama3", "factor": 8.0},
        },
    }


@FUZZ
@given(
    edits=st.lists(
        st.tuples(st.booleans(), st.sampled_from(_KEYS), _json | st.sampled_from(ROPE_TYPES)),
        min_size=1,
        max_size=3,
    )
)
def test_config_values_of_any_type(edits) -> None:
    cfg = _speculators_config()
    for at_top, key, value in edits:
        target = (
            cfg
            if at_top or not isinstance(cfg.get("transformer_layer_config"), dict)
            else cfg["transformer_layer_config"]
        )
        target[key] = value
    parsed = _loads_or_refuses(parse_draft_config, "config.json", cfg)
    if parsed is None:
        return
    c = parsed.config
    for v in (
        c.hidden_size,
        c.num_heads,
        c.num_kv_heads,
        c.head_dim,
        c.intermediate_size,
        c.vocab_size,
        c.draft_vocab_size,
        c.target_hidden_size,
        c.num_layers,
    ):
        assert type(v) is int and v > 0
    assert c.num_heads % c.num_kv_heads == 0 and c.draft_vocab_size <= c.vocab_size
    assert math.isfinite(c.rms_norm_eps) and c.rms_norm_eps > 0
    assert math.isfinite(c.rope.theta) and c.rope.theta > 0
    assert c.rope.rope_type in ROPE_TYPES
    factor = c.rope.scaling.get("factor")
    assert factor is None or (type(factor) in (int, float) and factor > 0)
    for flag in (c.norm_before_residual, c.norm_before_fc, c.fc_norm, c.norm_output):
        assert type(flag) is bool
    if c.aux_layer_ids is not None:
        assert all(type(i) is int for i in c.aux_layer_ids)
