"""SpecForge pull 186's MLA draft (`DeepseekV3ForCausalLMEagle3` with an `input_proj`): layer 0
projects [input_layernorm(embed) | hidden_norm(fc out)] from 2H to H (an RMSNorm over the 2H,
then a linear) and its MLA attention reads H; the later MLA draft's q_a / kv_a read the 2H concat.
The loader tells the two apart by their tensors; the layer is checked here against a float64
reference written from that pull request's module (its decoder layer and its TTT-cached
attention branch), independently of `inspector.model`."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from families import build
from safetensors.torch import load_file, save_file
from support import accumulation_tolerance, edited_copy

import inspector.model.rope as rope_mod
from inspector.errors import InputError
from inspector.formats import load_draft
from inspector.model import iter_steps

SHARED_CONFIGS = Path(__file__).resolve().parents[1].parent / "shared" / "configs"
PR186 = SHARED_CONFIGS / "specforge-pr186-deepseek-r1-mla.json"

needs_pr186 = pytest.mark.skipif(not PR186.is_file(), reason=f"{PR186} is absent")


pytestmark = pytest.mark.usefixtures("one_thread")


# -- the reference: SpecForge pull 186's module, re-derived in float64 ------------------------


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rope_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """apply_rotary_pos_emb_interleave: pairs (0,1), (2,3)... regrouped, then rotate_half."""
    b, h, s, d = x.shape
    x = x.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
    return x * cos + _rotate_half(x) * sin


class Pr186Layer:
    """DeepseekV3DecoderLayer of the pull request, on float64 copies of the stored tensors."""

    def __init__(self, stored: dict[str, torch.Tensor], cfg: dict) -> None:
        self.w = {k: v.double() for k, v in stored.items() if v.is_floating_point()}
        self.cfg = cfg
        self.k_cache: list[torch.Tensor] = []
        self.v_cache: list[torch.Tensor] = []
        head = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
        self.scaling = head**-0.5
        rs = cfg.get("rope_scaling")
        if rs is not None and rs.get("mscale_all_dim", 0):
            m = 0.1 * rs["mscale_all_dim"] * math.log(rs["factor"]) + 1.0 if rs["factor"] > 1 else 1
            self.scaling *= m * m

    def _lin(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return x @ self.w["midlayer." + name + ".weight"].T

    def _norm(self, x: torch.Tensor, name: str, eps: float) -> torch.Tensor:
        return _rms(x, self.w["midlayer." + name + ".weight"], eps)

    def rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """DeepseekV3RotaryEmbedding as the pull request has it: theta over qk_rope_head_dim,
        no rope_scaling, attention_scaling 1."""
        d = self.cfg["qk_rope_head_dim"]
        inv = 1.0 / (self.cfg["rope_theta"] ** (torch.arange(0, d, 2).double() / d))
        freqs = positions.double()[:, None] * inv[None]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()

    def __call__(self, emb: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor):
        c, eps = self.cfg, self.cfg["rms_norm_eps"]
        nh, nope, rope, vd = (
            c["num_attention_heads"],
            c["qk_nope_head_dim"],
            c["qk_rope_head_dim"],
            c["v_head_dim"],
        )
        b, t, _ = hidden.shape
        residual = hidden
        concat = torch.cat(
            (self._norm(emb, "input_layernorm", eps), self._norm(hidden, "hidden_norm", eps)), -1
        )
        x = self._lin(self._norm(concat, "input_proj.input_norm", eps), "input_proj.proj")
        # DeepseekV3Attention; q_a_layernorm / kv_a_layernorm keep DeepseekV3RMSNorm's eps 1e-6
        q = self._lin(
            self._norm(self._lin(x, "self_attn.q_a_proj"), "self_attn.q_a_layernorm", 1e-6),
            "self_attn.q_b_proj",
        )
        q = q.view(b, t, nh, nope + rope).transpose(1, 2)
        q_pass, q_rot = q.split([nope, rope], dim=-1)
        k_pass, k_rot = self._lin(x, "self_attn.kv_a_proj_with_mqa").split(
            [c["kv_lora_rank"], rope], -1
        )
        kv = self._lin(self._norm(k_pass, "self_attn.kv_a_layernorm", 1e-6), "self_attn.kv_b_proj")
        k_pass, v = kv.view(b, t, nh, nope + vd).transpose(1, 2).split([nope, vd], dim=-1)
        cos, sin = self.rope(positions)
        q_rot = _rope_interleaved(q_rot, cos, sin)
        k_rot = _rope_interleaved(k_rot.view(b, 1, t, rope), cos, sin).expand(b, nh, t, rope)
        q, k = torch.cat((q_pass, q_rot), -1), torch.cat((k_pass, k_rot), -1)
        # the cached (TTT) branch: causal scores on step 0's keys, one diagonal per later step
        self.k_cache.append(k)
        self.v_cache.append(v)
        scores = q @ self.k_cache[0].transpose(2, 3) * self.scaling
        causal = torch.full((t, t), float("-inf"), dtype=scores.dtype).triu(1)
        scores = scores + causal
        diag = [(q * ki).sum(-1, keepdim=True) * self.scaling for ki in self.k_cache[1:]]
        probs = torch.softmax(torch.cat([scores, *diag], -1), dim=-1)
        out = probs[..., :t] @ self.v_cache[0]
        for i, vi in enumerate(self.v_cache[1:]):
            out = out + probs[..., t + i : t + i + 1] * vi
        out = self._lin(out.transpose(1, 2).reshape(b, t, nh * vd), "self_attn.o_proj")
        h = residual + out
        normed = self._norm(h, "post_attention_layernorm", eps)
        up = torch.nn.functional.silu(self._lin(normed, "mlp.gate_proj")) * self._lin(
            normed, "mlp.up_proj"
        )
        return h + self._lin(up, "mlp.down_proj")


# -- tests --------------------------------------------------------------------------------------


@pytest.fixture
def pr186(tmp_path):
    if not PR186.is_file():
        pytest.skip(f"{PR186} is absent")
    return build(PR186, tmp_path / "pr186", seq_len=12)


def test_the_two_mla_layouts_are_told_apart_by_their_tensors(pr186, tmp_path):
    draft = load_draft(pr186.folder, embed=pr186.embed)
    assert draft.config.mla is not None and draft.config.mla.input_proj
    h = draft.config.hidden_size
    assert draft.weights["layers.0.self_attn.q_a_proj.weight"].shape[1] == h
    assert draft.weights["layers.0.input_proj.proj.weight"].shape == (h, 2 * h)
    # the later layout of the same config (attention on the 2H concat) keeps loading
    old = build(PR186, tmp_path / "old", seq_len=12, input_proj=False)
    later = load_draft(old.folder, embed=old.embed)
    assert later.config.mla is not None and not later.config.mla.input_proj
    assert later.weights["layers.0.self_attn.q_a_proj.weight"].shape[1] == 2 * h


@pytest.mark.parametrize("eps", [None, 1e-2])
def test_the_layer_equals_the_pull_requests_module(pr186, monkeypatch, tmp_path, eps):
    """Two TTT steps of the draft layer (step 1: the previous output, the next tokens, the
    positions one on, attending to step 0's keys causally and its own diagonally) against the
    float64 reference, within the error of the forward's float32 steps. eps: rms_norm_eps as
    published, or one that tells the config's eps from the q_a / kv_a norms' fixed 1e-6."""
    folder = pr186.folder
    if eps is not None:
        folder = edited_copy(folder, tmp_path / "eps", config=lambda c: c.update(rms_norm_eps=eps))
    draft = load_draft(folder, embed=pr186.embed, dtype=torch.float64)
    cfg = {**pr186.config, **({} if eps is None else {"rms_norm_eps": eps})}
    stored = load_file(str(folder / "model.safetensors"))
    embed = load_file(str(pr186.embed))["model.embed_tokens.weight"].double()
    g = torch.Generator().manual_seed(3)
    t, h = 12, cfg["hidden_size"]
    hidden = torch.randn(1, t, h, generator=g, dtype=torch.float64)
    tokens = torch.randint(0, cfg["vocab_size"], (1, t), generator=g)
    got = [z for _, z in iter_steps(draft, hidden, tokens, steps=2, position_offset=0)]
    ref_layer = Pr186Layer(stored, cfg)
    pos = torch.arange(t)
    z0 = ref_layer(embed[tokens], hidden, pos)
    tok1 = torch.zeros_like(tokens)
    tok1[:, : t - 1] = tokens[:, 1:]
    z1 = ref_layer(embed[tok1], z0, pos + 1)
    # Everything is float64 but the RMSNorms and the RoPE, which run in float32 as HF's do
    # (`inspector.model.rope`): float32's allowance over the longest of those reductions, the
    # norm of the 2H concat, bounds the difference; the float64 matmuls add nothing visible.
    tol0, tol1 = accumulation_tolerance(z0, 2 * h), accumulation_tolerance(z1, 2 * h)
    assert (got[0] - z0).abs().max() <= tol0
    assert (got[1] - z1[:, : t - 1]).abs().max() <= tol1
    # the tolerance is tight enough to see the rotary table: YaRN's (the config's rope_scaling,
    # which the pull request's table ignores) moves the output far beyond it
    monkeypatch.setattr(rope_mod, "rotary_rope", lambda cfg: cfg.rope)
    moved = next(iter(iter_steps(draft, hidden, tokens, position_offset=0)))[1]
    print(
        float((got[0] - z0).abs().max()),
        tol0,
        float((got[1] - z1[:, : t - 1]).abs().max()),
        tol1,
        float((moved - z0).abs().max()),
    )
    assert (moved - z0).abs().max() > 100 * tol0


def _without(folder: Path, prefix: str) -> None:
    w = load_file(str(folder / "model.safetensors"))
    save_file(
        {k: v for k, v in w.items() if not k.startswith(prefix)}, str(folder / "model.safetensors")
    )


def _one_line(err: pytest.ExceptionInfo, folder: Path, field: str, *words: str) -> None:
    text = str(err.value)
    assert "\n" not in text
    assert str(folder / "model.safetensors") in text and field in text, text
    assert all(w in text for w in words), text


@needs_pr186
def test_input_proj_with_2h_attention_is_refused(tmp_path):
    old = build(PR186, tmp_path / "old", seq_len=12, input_proj=False)
    h = old.config["hidden_size"]
    mixed = edited_copy(
        old.folder,
        tmp_path / "mixed",
        tensors=lambda w: {
            "midlayer.input_proj.input_norm.weight": torch.ones(2 * h, dtype=torch.float16),
            "midlayer.input_proj.proj.weight": torch.zeros(h, 2 * h, dtype=torch.float16),
        },
    )
    with pytest.raises(InputError) as err:
        load_draft(mixed, embed=old.embed)
    _one_line(err, mixed, "layers.0.self_attn.q_a_proj.weight", f"in-dim {2 * h}", "PR 186")


def test_h_attention_without_input_proj_is_refused(pr186, tmp_path):
    folder = edited_copy(pr186.folder, tmp_path / "no_proj")
    _without(folder, "midlayer.input_proj.")
    with pytest.raises(InputError) as err:
        load_draft(folder, embed=pr186.embed)
    _one_line(err, folder, "layers.0.input_proj.proj.weight", "tensor not found", "PR 186")


def test_input_proj_of_a_wrong_shape_names_the_layout(pr186, tmp_path):
    h = pr186.config["hidden_size"]
    bad = edited_copy(
        pr186.folder,
        tmp_path / "bad",
        tensors=lambda w: {
            "midlayer.input_proj.proj.weight": torch.zeros(h, h, dtype=torch.float16)
        },
    )
    with pytest.raises(InputError) as err:
        load_draft(bad, embed=pr186.embed)
    _one_line(err, bad, "layers.0.input_proj.proj.weight", f"expected ({h}, {2 * h})")
    q_bad = edited_copy(
        pr186.folder,
        tmp_path / "q_bad",
        tensors=lambda w: {
            "midlayer.self_attn.q_a_proj.weight": torch.zeros(32, 3 * h, dtype=torch.float16)
        },
    )
    with pytest.raises(InputError) as err:
        load_draft(q_bad, embed=pr186.embed)
    _one_line(err, q_bad, "layers.0.self_attn.q_a_proj.weight", "PR 186")


@needs_pr186
def test_an_in_dim_of_neither_layout_names_both(tmp_path):
    old = build(PR186, tmp_path / "old", seq_len=12, input_proj=False)
    h = old.config["hidden_size"]
    q_a = torch.zeros(old.config["q_lora_rank"], 3 * h, dtype=torch.float16)
    bad = edited_copy(
        old.folder, tmp_path / "bad", tensors=lambda w: {"midlayer.self_attn.q_a_proj.weight": q_a}
    )
    with pytest.raises(InputError) as err:
        load_draft(bad, embed=old.embed)
    _one_line(err, bad, "layers.0.self_attn.q_a_proj.weight", "2*hidden_size", "PR 186")


def test_input_proj_without_mla_config_says_so(tiny_synthetic, tmp_path):
    h = 64
    folder = edited_copy(
        tiny_synthetic[0],
        tmp_path / "d",
        tensors=lambda w: {"midlayer.input_proj.proj.weight": torch.zeros(h, 2 * h)},
    )
    with pytest.raises(InputError) as err:
        load_draft(folder)
    assert "\n" not in str(err.value) and "kv_lora_rank" in str(err.value)
    assert "input_proj" in str(err.value) and "model.safetensors" in str(err.value)
