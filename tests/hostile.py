"""A corpus of broken and hostile inputs, each made from one small, valid world.

The world: the tiny synthetic draft (speculators layout), three speculators-v1 samples and a target
folder holding what the inspector reads from a target (embedding, final norm, lm_head). Every
`Case` breaks a fresh copy of it in one way and says what a user must be told: which file, which
field, and whether the whole run is refused (`load`), one sample is skipped (`sample`), or the
output folder is refused (`out`). tests/test_hostile.py runs every case through the commands.
"""

from __future__ import annotations

import json
import os
import pickle
import pickletools
import shutil
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

V, H, D = 256, 64, 96  # the tiny synthetic draft's vocab, hidden size, draft vocab


@dataclass
class World:
    root: Path

    @property
    def ckpt(self) -> Path:
        return self.root / "draft"

    @property
    def samples(self) -> Path:
        return self.root / "samples"

    @property
    def target(self) -> Path:
        return self.root / "target"

    @property
    def config(self) -> Path:
        return self.ckpt / "config.json"

    @property
    def weights(self) -> Path:
        return self.ckpt / "model.safetensors"

    def sample(self, i: int) -> Path:
        return self.samples / f"data_{i}.pt"


def build_world(root: Path) -> World:
    """The valid world every case starts from."""
    from inspector.synthetic import SyntheticSpec, write_synthetic

    write_synthetic(root, SyntheticSpec(size="tiny", n_samples=3, seq_len=24))
    w = World(root)
    w.target.mkdir()
    embed = load_file(str(w.weights))["embed_tokens.weight"]
    g = torch.Generator().manual_seed(5)
    save_file(
        {
            "model.embed_tokens.weight": embed.contiguous(),
            "model.norm.weight": torch.ones(H),
            "lm_head.weight": torch.randn(V, H, generator=g) / H**0.5,
        },
        str(w.target / "model.safetensors"),
    )
    (w.target / "config.json").write_text(
        json.dumps({"model_type": "llama", "hidden_size": H, "vocab_size": V, "rms_norm_eps": 1e-5})
    )
    return w


# --- small editing tools ----------------------------------------------------------------------
def edit_config(w: World, fn: Callable[[dict], None]) -> None:
    cfg = json.loads(w.config.read_text())
    fn(cfg)
    w.config.write_text(json.dumps(cfg))


def layer(fn: Callable[[dict], None]) -> Callable[[World], None]:
    """Edit the decoder's keys (transformer_layer_config)."""
    return lambda w: edit_config(w, lambda c: fn(c["transformer_layer_config"]))


def top(key: str, value: object) -> Callable[[World], None]:
    return lambda w: edit_config(w, lambda c: c.__setitem__(key, value))


def set_layer(key: str, value: object) -> Callable[[World], None]:
    return layer(lambda c: c.__setitem__(key, value))


def edit_weights(w: World, fn: Callable[[dict], None], path: Path | None = None) -> None:
    path = path or w.weights
    state = load_file(str(path))
    fn(state)
    save_file({k: v.contiguous() for k, v in state.items()}, str(path))


def weights(fn: Callable[[dict], None]) -> Callable[[World], None]:
    return lambda w: edit_weights(w, fn)


def edit_sample(i: int, fn: Callable[[dict], None]) -> Callable[[World], None]:
    def run(w: World) -> None:
        d = torch.load(w.sample(i), weights_only=True)
        fn(d)
        torch.save(d, w.sample(i))

    return run


def set_item(key: str, index: int, value: object) -> Callable[[dict], None]:
    def fn(d: dict) -> None:
        t = d[key].clone()
        t[index] = value
        d[key] = t

    return fn


def edit_data_config(fn: Callable[[dict], None]) -> Callable[[World], None]:
    def run(w: World) -> None:
        p = w.samples / "data_config.json"
        cfg = json.loads(p.read_text())
        fn(cfg)
        p.write_text(json.dumps(cfg))

    return run


def shard(weight_map_of: Callable[[World, list[str]], object]) -> Callable[[World], None]:
    """Replace model.safetensors by a sharded index whose weight_map the case writes."""

    def run(w: World) -> None:
        names = list(load_file(str(w.weights)))
        os.rename(w.weights, w.ckpt / "model-00001-of-00001.safetensors")
        index = {"metadata": {}, "weight_map": weight_map_of(w, names)}
        (w.ckpt / "model.safetensors.index.json").write_text(json.dumps(index))

    return run


def rewrite_zip(path: Path, pickle_fn=None, compress: bool = False) -> None:
    """Re-pack a torch zip archive, optionally editing its data.pkl or compressing its records."""
    src = zipfile.ZipFile(path)
    entries = [(i.filename, src.read(i.filename)) for i in src.infolist()]
    src.close()
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", compression=method) as z:
        for name, data in entries:
            if pickle_fn is not None and name.endswith("data.pkl"):
                data = pickle_fn(data)
            z.writestr(name, data)


def lie_about_storage(data: bytes) -> bytes:
    """The first storage declares 2**31 - 1 elements instead of what its record holds."""
    ops = list(pickletools.genops(data))
    k = next(i for i, (op, _, _) in enumerate(ops) if op.name == "BINPERSID")
    # ... numel, TUPLE, [BINPUT], BINPERSID: the id ('storage', type, key, location, numel)
    t = max(i for i in range(k) if ops[i][0].name == "TUPLE")
    numel_pos, tuple_pos = ops[t - 1][2], ops[t][2]
    return data[:numel_pos] + b"J" + struct.pack("<i", 2**31 - 1) + data[tuple_pos:]


def make_fifo(path: Path) -> None:
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def link_to(path: Path, dest: str) -> None:
    path.unlink(missing_ok=True)
    path.symlink_to(dest)


def sparse_file(path: Path, size: int) -> None:
    """A file of `size` bytes that takes no disk space (its size alone must be refused)."""
    with open(path, "wb") as f:
        f.truncate(size)


class _Evil:
    marker: Path | None = None

    def __reduce__(self):
        return (os.system, (f"touch {_Evil.marker}",))


def evil_sample(i: int, as_zip: bool) -> Callable[[World], None]:
    def run(w: World) -> None:
        _Evil.marker = w.root / "pwned"
        if as_zip:
            torch.save({"input_ids": _Evil()}, w.sample(i))
        else:
            w.sample(i).write_bytes(pickle.dumps({"input_ids": _Evil()}))

    return run


def safetensors_header_edit(fn: Callable[[dict], None]) -> Callable[[World], None]:
    def run(w: World) -> None:
        data = w.weights.read_bytes()
        (n,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8 : 8 + n])
        fn(header)
        raw = json.dumps(header).encode()
        raw += b" " * ((8 - len(raw) % 8) % 8)
        w.weights.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + n :])

    return run


def target_tensor(name: str, t: torch.Tensor) -> Callable[[World], None]:
    return lambda w: edit_weights(
        w, lambda s: s.__setitem__(name, t), w.target / "model.safetensors"
    )


def tied_bin(w: World) -> None:
    """pytorch_model.bin whose three [H] norms are one shared tensor (tied, as a .bin can hold)."""
    state = load_file(str(w.weights))
    shared = torch.ones(H)
    for k in ("layers.0.input_layernorm.weight", "layers.0.hidden_norm.weight", "norm.weight"):
        state[k] = shared
    torch.save(state, w.ckpt / "pytorch_model.bin")
    w.weights.unlink()


# --- the corpus -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One broken input. `level`: 'load' (every command refuses the run, exit 2), 'sample' (one
    sample is skipped, the others still count), 'out' (--write-fixed OUT is refused, exit 2),
    'ok' (the run succeeds; the case checks what was and was not done)."""

    name: str
    make: Callable[[World], object]
    file: str  # the file name the one error line must name
    field: str | None  # and the field
    level: str = "load"
    target: bool = False  # pass --target (cases about the target folder)
    samples: Callable[[World], list[str]] | None = None  # SAMPLES args other than the folder
    extra: Callable[[World], list[str]] = field(default=lambda w: [])
    bad_sample: int = 1  # for level 'sample': which one is skipped


CFG = "config.json"
ST = "model.safetensors"
_L = "transformer_layer_config."

CONFIG_CASES = [
    Case("draft_vocab_size_string", top("draft_vocab_size", "96"), CFG, "draft_vocab_size"),
    Case("draft_vocab_size_negative", top("draft_vocab_size", -96), CFG, "draft_vocab_size"),
    Case("draft_vocab_over_vocab", top("draft_vocab_size", 999), CFG, "draft_vocab_size"),
    Case("target_hidden_size_string", top("target_hidden_size", "64"), CFG, "target_hidden_size"),
    Case("target_hidden_size_zero", top("target_hidden_size", 0), CFG, "target_hidden_size"),
    Case("hidden_size_negative", set_layer("hidden_size", -64), CFG, _L + "hidden_size"),
    Case("hidden_size_fraction", set_layer("hidden_size", 64.5), CFG, _L + "hidden_size"),
    Case("heads_string", set_layer("num_attention_heads", "4"), CFG, _L + "num_attention_heads"),
    Case("kv_heads_not_dividing", set_layer("num_key_value_heads", 3), CFG, "num_key_value_heads"),
    Case("vocab_size_zero", set_layer("vocab_size", 0), CFG, _L + "vocab_size"),
    Case("vocab_size_missing", layer(lambda c: c.pop("vocab_size")), CFG, _L + "vocab_size"),
    Case("intermediate_bool", set_layer("intermediate_size", True), CFG, "intermediate_size"),
    Case("rms_norm_eps_string", set_layer("rms_norm_eps", "1e-5"), CFG, _L + "rms_norm_eps"),
    Case("rms_norm_eps_negative", set_layer("rms_norm_eps", -1e-5), CFG, _L + "rms_norm_eps"),
    Case("rope_theta_string", set_layer("rope_theta", "10000"), CFG, _L + "rope_theta"),
    Case("rope_theta_zero", set_layer("rope_theta", 0), CFG, _L + "rope_theta"),
    Case(
        "rope_params_theta_zero",
        set_layer("rope_parameters", {"rope_theta": 0, "rope_type": "default"}),
        CFG,
        _L + "rope_parameters.rope_theta",
    ),
    Case(
        "rope_factor_string",
        set_layer("rope_scaling", {"rope_type": "linear", "factor": "2"}),
        CFG,
        _L + "rope_scaling.factor",
    ),
    Case(
        "rope_linear_factor_zero",
        set_layer("rope_scaling", {"rope_type": "linear", "factor": 0}),
        CFG,
        _L + "rope_scaling.factor",
    ),
    Case(
        "rope_unknown_type",
        set_layer("rope_scaling", {"rope_type": "spiral", "factor": 2.0}),
        CFG,
        _L + "rope_scaling.rope_type",
    ),
    Case(
        "rope_llama3_without_factor",
        set_layer("rope_scaling", {"rope_type": "llama3", "low_freq_factor": 1.0}),
        CFG,
        _L + "rope_scaling.factor",
    ),
    Case(
        "rope_yarn_beta_string",
        set_layer("rope_scaling", {"rope_type": "yarn", "factor": 4.0, "beta_fast": "32"}),
        CFG,
        _L + "rope_scaling.beta_fast",
    ),
    Case("rope_scaling_list", set_layer("rope_scaling", [1, 2]), CFG, _L + "rope_scaling"),
    Case(
        "aux_ids_strings",
        top("eagle_aux_hidden_state_layer_ids", ["0", "2", "4"]),
        CFG,
        "eagle_aux_hidden_state_layer_ids",
    ),
    # a negative id loads as written: the doctor's wiring finding names it (test_malformed_ids)
    Case(
        "eagle_config_ids_bool",
        lambda w: edit_config(
            w,
            lambda c: (
                c.pop("eagle_aux_hidden_state_layer_ids"),
                c.__setitem__("eagle_config", {"eagle_aux_hidden_state_layer_ids": [True, 1]}),
            ),
        ),
        CFG,
        "eagle_config.eagle_aux_hidden_state_layer_ids",
    ),
    Case("flag_string", top("norm_before_residual", "false"), CFG, "norm_before_residual"),
    Case(
        "layer_config_list", top("transformer_layer_config", [1]), CFG, "transformer_layer_config"
    ),
    Case("not_eagle3", top("speculators_model_type", "medusa"), CFG, "speculators_model_type"),
    Case("config_array", lambda w: w.config.write_text("[1, 2]"), CFG, None),
    Case("config_truncated", lambda w: w.config.write_text('{"a": '), CFG, None),
    Case("config_deep", lambda w: w.config.write_text("[" * 100_000), CFG, None),
    Case("config_nan_theta", set_layer("rope_theta", float("nan")), CFG, _L + "rope_theta"),
]

WEIGHT_CASES = [
    Case("d2t_fractional", weights(lambda s: s.__setitem__("d2t", s["d2t"] + 0.5)), ST, "d2t"),
    Case("d2t_bool", weights(lambda s: s.__setitem__("d2t", s["d2t"] > 0)), ST, "d2t"),
    Case(
        "t2d_not_binary",
        weights(lambda s: s.__setitem__("t2d", s["t2d"].long() * 2)),
        ST,
        "t2d",
    ),
    Case(
        "fc_integer",
        weights(lambda s: s.__setitem__("fc.weight", s["fc.weight"].long())),
        ST,
        "fc.weight",
    ),
    Case(
        "header_offsets_past_end",
        safetensors_header_edit(
            lambda h: h["norm.weight"].__setitem__("data_offsets", [0, 10**12])
        ),
        ST,
        "norm.weight",
    ),
    Case(
        "header_huge_shape",
        safetensors_header_edit(lambda h: h["norm.weight"].__setitem__("shape", [2**40])),
        ST,
        "norm.weight",
    ),
    Case(
        "header_length_lies",
        lambda w: w.weights.write_bytes(struct.pack("<Q", 2**60) + w.weights.read_bytes()[8:]),
        ST,
        None,
    ),
    Case(
        "weights_truncated",
        lambda w: w.weights.write_bytes(w.weights.read_bytes()[:5000]),
        ST,
        None,
    ),
    Case(
        "weight_map_list",
        shard(lambda w, names: [[n, "model-00001-of-00001.safetensors"] for n in names]),
        "model.safetensors.index.json",
        "weight_map",
    ),
    Case(
        "weight_map_parent",
        shard(lambda w, names: {n: "sub/../../samples/x.safetensors" for n in names}),
        "model.safetensors.index.json",
        "weight_map[",
    ),
    Case(
        "weight_map_escapes",
        shard(
            lambda w, names: {
                n: (
                    "../target/model.safetensors"
                    if n == "norm.weight"
                    else "model-00001-of-00001.safetensors"
                )
                for n in names
            }
        ),
        "model.safetensors.index.json",
        "weight_map[norm.weight]",
    ),
    Case(
        "weight_map_absolute",
        shard(lambda w, names: {n: str(w.root / "target" / "model.safetensors") for n in names}),
        "model.safetensors.index.json",
        "weight_map[",
    ),
    Case(
        "bin_compressed",
        lambda w: (
            torch.save(load_file(str(w.weights)), w.ckpt / "pytorch_model.bin"),
            w.weights.unlink(),
            rewrite_zip(w.ckpt / "pytorch_model.bin", compress=True),
        ),
        "pytorch_model.bin",
        "data.pkl",
    ),
]

SPECIAL_FILE_CASES = [
    Case("config_dev_zero", lambda w: link_to(w.config, "/dev/zero"), CFG, None),
    Case("config_fifo", lambda w: make_fifo(w.config), CFG, None),
    Case("weights_fifo", lambda w: make_fifo(w.weights), ST, None),
    Case("config_huge", lambda w: sparse_file(w.config, 65 * 2**20), CFG, None),
    Case(
        "sample_fifo_named",
        lambda w: make_fifo(w.sample(0)),
        "data_0.pt",
        None,
        samples=lambda w: [str(w.sample(0))],
    ),
    Case(
        "sample_dev_zero_named",
        lambda w: link_to(w.sample(0), "/dev/zero"),
        "data_0.pt",
        None,
        samples=lambda w: [str(w.sample(0))],
    ),
    Case(
        "data_config_fifo",
        lambda w: make_fifo(w.samples / "data_config.json"),
        "data_config.json",
        None,
    ),
    Case(
        "data_config_negative_id",
        edit_data_config(lambda c: c["hidden_states"].__setitem__("layer_ids", [-1, 2, 4, 6])),
        "data_config.json",
        "hidden_states.layer_ids",
    ),
    Case(
        "data_config_bool_id",
        edit_data_config(lambda c: c["hidden_states"].__setitem__("layer_ids", [False, 2, 4, 6])),
        "data_config.json",
        "hidden_states.layer_ids",
    ),
    Case(
        "data_config_convention",
        edit_data_config(lambda c: c["hidden_states"].__setitem__("index_convention", "vllm")),
        "data_config.json",
        "index_convention",
    ),
]

SAMPLE_CASES = [
    Case(
        "token_over_vocab",
        edit_sample(1, set_item("input_ids", 5, V)),
        "data_1.pt",
        "input_ids",
        "sample",
    ),
    Case(
        "token_negative",
        edit_sample(1, set_item("input_ids", 3, -7)),
        "data_1.pt",
        "input_ids",
        "sample",
    ),
    Case(
        "mask_two", edit_sample(1, set_item("loss_mask", 9, 2)), "data_1.pt", "loss_mask", "sample"
    ),
    Case(
        "mask_minus_one",
        edit_sample(1, set_item("loss_mask", 9, -1)),
        "data_1.pt",
        "loss_mask",
        "sample",
    ),
    Case(
        "mask_half",
        edit_sample(
            1,
            lambda d: (
                d.__setitem__("loss_mask", d["loss_mask"].float()),
                set_item("loss_mask", 9, 0.5)(d),
            ),
        ),
        "data_1.pt",
        "loss_mask",
        "sample",
    ),
    Case(
        "ids_float",
        edit_sample(1, lambda d: d.__setitem__("input_ids", d["input_ids"].float())),
        "data_1.pt",
        "input_ids",
        "sample",
    ),
    Case(
        "slot_not_tensor",
        edit_sample(1, lambda d: d["hidden_states"].__setitem__(2, "oops")),
        "data_1.pt",
        "hidden_states[2]",
        "sample",
    ),
    Case(
        "first_sample_bad",
        edit_sample(0, set_item("input_ids", 0, 10**6)),
        "data_0.pt",
        "input_ids",
        "sample",
        bad_sample=0,
    ),
    Case(
        "sample_compressed",
        lambda w: rewrite_zip(w.sample(1), compress=True),
        "data_1.pt",
        "data.pkl",
        "sample",
    ),
    Case(
        "sample_lies_about_size",
        lambda w: rewrite_zip(w.sample(1), lie_about_storage),
        "data_1.pt",
        "data/0",
        "sample",
    ),
    Case("sample_pickle", evil_sample(1, as_zip=False), "data_1.pt", None, "sample"),
    Case("sample_evil_zip", evil_sample(1, as_zip=True), "data_1.pt", None, "sample"),
    Case(
        "sample_truncated",
        lambda w: w.sample(1).write_bytes(w.sample(1).read_bytes()[:300]),
        "data_1.pt",
        None,
        "sample",
    ),
]


def _all_samples_bad(w: World) -> None:
    for i in range(3):
        edit_sample(i, set_item("loss_mask", 1, 7))(w)


SET_CASES = [Case("every_sample_bad", _all_samples_bad, "data_0.pt", "loss_mask")]

TARGET_CASES = [
    Case(
        "target_head_smaller",
        target_tensor("lm_head.weight", torch.randn(200, H)),
        ST,
        "lm_head.weight",
        target=True,
    ),
    Case(
        "target_head_hidden",
        target_tensor("lm_head.weight", torch.randn(V, H // 2)),
        ST,
        "lm_head.weight",
        target=True,
    ),
    Case(
        "target_norm_size",
        target_tensor("model.norm.weight", torch.ones(H // 2)),
        ST,
        "model.norm.weight",
        target=True,
    ),
    Case(
        "target_eps_string",
        lambda w: (w.target / "config.json").write_text(json.dumps({"rms_norm_eps": "tiny"})),
        CFG,
        "rms_norm_eps",
        target=True,
    ),
    Case(
        "embed_wrong_shape",
        lambda w: save_file(
            {"model.embed_tokens.weight": torch.randn(V, H // 2)}, str(w.root / "embed.safetensors")
        ),
        "embed.safetensors",
        "model.embed_tokens.weight",
        extra=lambda w: ["--embed", str(w.root / "embed.safetensors")],
    ),
]

LOAD_CASES = CONFIG_CASES + WEIGHT_CASES + SPECIAL_FILE_CASES + SET_CASES + TARGET_CASES


OUT_CASES = [
    # (name, OUT relative to the world root or absolute-making function, prepare)
    ("into_samples", lambda w: w.samples / "fixed", None),
    ("into_checkpoint", lambda w: w.ckpt / "fixed", None),
    ("into_target", lambda w: w.target / "sub" / "fixed", None),
    (
        "existing_not_empty",
        lambda w: w.root / "taken",
        lambda w: (w.root / "taken").mkdir() or (w.root / "taken" / "x").write_text("x"),
    ),
    ("existing_file", lambda w: w.root / "afile", lambda w: (w.root / "afile").write_text("x")),
    (
        "parent_is_file",
        lambda w: w.root / "afile" / "fixed",
        lambda w: (w.root / "afile").write_text("x"),
    ),
    ("nul_in_name", lambda w: Path(str(w.root / "fi") + "\0xed"), None),
]


def snapshot(root: Path) -> dict[str, object]:
    """Every path under root with its bytes (regular files) or its kind (anything else)."""
    out: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = "dir"
            elif p.is_file():
                out[rel] = (
                    p.read_bytes() if p.stat().st_size < 2**20 else ("size", p.stat().st_size)
                )
            else:
                out[rel] = "special"
    return out


def copy_world(base: World, dest: Path) -> World:
    shutil.copytree(base.root, dest, symlinks=True)
    return World(dest)
