"""The config values a trainer may have used instead of the ones config.json states: each an
`Alternative`, the same draft (same weights) under one changed value, with the config fix that
makes it so. `config_alternatives` scores them; this module only builds them.

- norm_before_residual flipped (and who reads which value from a config.json that omits it:
  `residual_readings`);
- rope: the target's rope_theta / scaling, the default theta 10000, or no scaling;
- head_dim: RoPE over hidden_size/heads or 2*hidden_size/heads dims instead of head_dim (over d
  dims the frequencies equal those of theta' = theta^(head_dim/d) over head_dim).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

from inspector.doctor.finding import ConfigFix, Kind
from inspector.draft import Draft, RopeConfig
from inspector.engines import Engine
from inspector.engines import engine as serving_engine
from inspector.errors import InputError
from inspector.evaluate import Evaluator
from inspector.formats.checkpoint import rope_config
from inspector.formats.tensorfiles import read_json

DEFAULT_THETA = 10000.0


@dataclass(frozen=True)
class Alternative:
    """One changed config value: its kind, label, the draft as it runs under it, the config fix
    that makes it so, and (head_dim) the dimension its RoPE spans."""

    kind: Kind
    label: str
    draft: Draft
    config_fix: ConfigFix
    rope_dim: int | None = None


def residual_readings(cfg) -> dict[str, bool]:
    """norm_before_residual as each reader takes it from this config.json.

    The engines' readings are `engine_reading`'s rows (the one place that says what each engine
    reads): the key present, every reader that honours it takes its value, and SGLang 0.5.23's
    llama_eagle3 reads it nowhere and always adds the raw fc output; the key absent, vLLM's
    parser of speculators configs sets true and its flat Llama draft (SpecForge, EAGLE layouts)
    reads the missing attribute as false. speculators' own config class defaults to false.
    """
    from inspector.doctor.wiring.engine_reading import primary_reader, reader_norms

    raw: dict = {}
    if cfg.norm_before_residual_explicit:
        raw["norm_before_residual"] = bool(cfg.norm_before_residual)
    if cfg.source_format == "speculators":
        raw["speculators_config"] = {}
    out = {}
    for which in (Engine.VLLM, Engine.SGLANG):
        reader = primary_reader(which)
        assert reader is not None
        out[which.display] = next(
            v for flag, v, _ in reader_norms(reader, raw) if flag == "norm_before_residual"
        )
    if cfg.source_format == "speculators":
        out["speculators"] = bool(cfg.norm_before_residual_explicit and cfg.norm_before_residual)
    return out


def target_rope(ev: Evaluator, target_config: str | Path | None = None) -> RopeConfig | None:
    """The target's RoPE settings from its config.json (via --target), if known."""
    path = Path(target_config) if target_config else None
    if path is None and ev.target_head is not None and ev.target_head.path:
        path = Path(ev.target_head.path)
    if path is None:
        return None
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        return None
    try:
        cfg = read_json(path)
    except InputError:
        return None
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    return rope_config(text, cfg, path)


def _rope_alternatives(draft: Draft, trope: RopeConfig | None) -> list[Alternative]:
    cfg = draft.config
    rope = cfg.rope
    out: list[Alternative] = []

    def alt(label: str, new: RopeConfig, fix: ConfigFix) -> Alternative:
        return Alternative(Kind.ROPE, label, replace(draft, config=replace(cfg, rope=new)), fix)

    thetas: list[tuple[str, float]] = []
    if trope is not None and not math.isclose(trope.theta, rope.theta):
        thetas.append(("target", trope.theta))
    if not math.isclose(rope.theta, DEFAULT_THETA) and all(
        not math.isclose(t, DEFAULT_THETA) for _, t in thetas
    ):
        thetas.append(("default", DEFAULT_THETA))
    for who, theta in thetas:
        out.append(
            alt(
                f"rope_theta={theta:g} ({who})",
                replace(rope, theta=theta),
                ConfigFix(rope_theta=theta),
            )
        )
    if rope.rope_type not in ("default", None):
        out.append(
            alt(
                f"no rope scaling (theta {rope.theta:g})",
                RopeConfig(theta=rope.theta),
                ConfigFix(drop_rope_scaling=True),
            )
        )
    if (
        trope is not None
        and trope.rope_type not in ("default", None)
        and (trope.rope_type, trope.scaling) != (rope.rope_type, rope.scaling)
    ):
        fix = ConfigFix(
            rope_theta=trope.theta,
            rope_scaling={"rope_type": trope.rope_type, **trope.scaling},
        )
        out.append(alt(f"the target's rope ({trope.rope_type}, theta {trope.theta:g})", trope, fix))
    return out


def _head_dim_alternatives(draft: Draft) -> list[Alternative]:
    cfg = draft.config
    rope, hd = cfg.rope, cfg.head_dim
    out: list[Alternative] = []
    if cfg.mla is not None:  # MLA rotates its own rope dims: the hidden/heads trap is Llama's
        return out
    for label, d in (
        ("hidden_size/heads", cfg.hidden_size // cfg.num_heads),
        ("2*hidden_size/heads", 2 * cfg.hidden_size // cfg.num_heads),
    ):
        if d != hd and d > 0 and d % 2 == 0 and d != (rope.dim or hd):
            # Only plain and linear rope have an exact theta over head_dim for a rope over d.
            exact = rope.rope_type in ("default", "linear", None)
            exact = exact and math.log(rope.theta) * hd / d < 700  # theta^(hd/d): a float
            fix = ConfigFix(rope_theta=rope.theta ** (hd / d)) if exact else ConfigFix()
            new = replace(draft, config=replace(cfg, rope=replace(rope, dim=d)))
            out.append(Alternative(Kind.HEAD_DIM, f"RoPE over {d} dims ({label})", new, fix, d))
    return out


def alternatives(draft: Draft, trope: RopeConfig | None) -> list[Alternative]:
    """Every alternative a trainer may have used, in KINDS order."""
    nbr = not draft.config.norm_before_residual
    flipped = replace(draft, config=replace(draft.config, norm_before_residual=nbr))
    return [
        Alternative(
            Kind.NORM_BEFORE_RESIDUAL,
            f"norm_before_residual={str(nbr).lower()}",
            flipped,
            ConfigFix(norm_before_residual=nbr),
        ),
        *_rope_alternatives(draft, trope),
        *_head_dim_alternatives(draft),
    ]


def reads_nowhere(who: str, flag: str = "norm_before_residual") -> bool:
    """Whether the reader `who` names (an engine's display name, as `residual_readings` keys
    them; "speculators" is none) reads `flag` nowhere and so runs without it (SGLang and
    norm_before_residual)."""
    from inspector.engines.reading import NEVER

    try:
        reader = serving_engine(who).primary_reader()
    except KeyError:
        return False
    return reader is not None and any(f == flag and how == NEVER for f, how, _ in reader.norms)
