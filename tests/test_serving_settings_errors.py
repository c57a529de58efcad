"""The serving settings' validation, one exact line per bad value naming its flag, and the JSON
they write (`Sampling`, `Verification`, `SamplingSettings`, `sweep_grid`); the target KV cache
trimmed to the kept positions, for each cache API transformers has had."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from inspector.errors import InputError
from inspector.serving.cost import sweep_grid
from inspector.serving.sampling_settings import (
    Sampling,
    SamplingSettings,
    Verification,
    VerifyRule,
)
from inspector.serving.verify import trim_cache


@pytest.mark.parametrize(
    ("make", "line"),
    [
        (lambda: Sampling(-1.0), "--temperature: -1.0: must be >= 0"),
        (lambda: Sampling(0.7, top_k=-1), "--top-k: -1: must be >= 0 (0: off)"),
        (lambda: Sampling(0.7, top_p=0.0), "--top-p: 0.0: must be in (0, 1] (1: off)"),
        (lambda: Sampling(0.7, top_p=1.5), "--top-p: 1.5: must be in (0, 1] (1: off)"),
        (
            lambda: Verification(VerifyRule.SGLANG_TARGET_ONLY, threshold_single=1.5),
            "--threshold-single: 1.5: must be in [0, 1]",
        ),
        (
            lambda: Verification(VerifyRule.SGLANG_TARGET_ONLY, threshold_acc=-0.1),
            "--threshold-acc: -0.1: must be in [0, 1]",
        ),
        (
            lambda: Verification(VerifyRule.SGLANG_TARGET_ONLY, threshold_acc=0.0),
            "--threshold-acc: 0: SGLang divides by it; use > 0",
        ),
        (
            lambda: Verification(VerifyRule.VLLM_ONEHOT, threshold_single=0.5),
            "--threshold-single: thresholds below 1 are SGLang's target-only verification's, "
            "not vllm-onehot",
        ),
        (
            lambda: Verification(VerifyRule.VLLM_ONEHOT).check_tree(False),
            "--verify: vllm-onehot verifies chains (--topk 1); trees: sglang-target-only",
        ),
    ],
)
def test_each_bad_setting_is_one_line_naming_its_flag(make, line):
    with pytest.raises(InputError) as e:
        make()
    assert str(e.value) == line


def test_the_settings_json():
    s = SamplingSettings(Sampling(0.7, 20, 0.9), Verification(VerifyRule.SGLANG_TARGET_ONLY, 0.5))
    assert s.to_dict() == {
        "temperature": 0.7,
        "top_k": 20,
        "top_p": 0.9,
        "verification": {
            "rule": "sglang-target-only",
            "threshold_single": 0.5,
            "threshold_acc": 1.0,
        },
    }
    Verification(VerifyRule.SGLANG_TARGET_ONLY).check_tree(False)  # a tree's rule: no error


def test_the_grid_keeps_the_kv_mode():
    specs, _ = sweep_grid([2], [1, 2], [4], kv="sglang")
    assert [s.kv for s in specs] == ["sglang", "sglang"]


def _kv(n: int) -> torch.Tensor:
    return torch.arange(n, dtype=torch.float32).reshape(1, 1, n, 1).repeat(1, 2, 1, 3)


def test_trim_keeps_the_positions_in_either_cache_api():
    keep = torch.tensor([0, 2, 3])
    # transformers 5: cache.layers, each with keys/values [B, H, T, D]; an empty layer skipped
    layers = [SimpleNamespace(keys=_kv(5), values=_kv(5) + 10), SimpleNamespace(keys=None)]
    trim_cache(SimpleNamespace(layers=layers), keep)
    assert layers[0].keys[0, 0, :, 0].tolist() == [0.0, 2.0, 3.0]
    assert layers[0].values[0, 1, :, 2].tolist() == [10.0, 12.0, 13.0]
    assert layers[1].keys is None
    # transformers 4: key_cache / value_cache lists, and the count of tokens seen
    old = SimpleNamespace(key_cache=[_kv(5)], value_cache=[_kv(5) + 10], _seen_tokens=5)
    trim_cache(old, keep)
    assert old.key_cache[0][0, 0, :, 0].tolist() == [0.0, 2.0, 3.0]
    assert old.value_cache[0][0, 0, :, 0].tolist() == [10.0, 12.0, 13.0]
    assert old._seen_tokens == 3


def test_trim_refuses_sliding_layers_and_unknown_caches():
    sliding = SimpleNamespace(layers=[SimpleNamespace(keys=_kv(3), values=_kv(3), is_sliding=True)])
    with pytest.raises(InputError) as e:
        trim_cache(sliding, torch.tensor([0]))
    assert str(e.value) == "target: sliding-window attention layers: the live loop needs full ones"
    full = SimpleNamespace(layers=[SimpleNamespace(keys=_kv(3), values=_kv(3), is_sliding=False)])
    trim_cache(full, torch.tensor([1]))
    assert full.layers[0].keys.shape[2] == 1
    with pytest.raises(InputError) as e:
        trim_cache(SimpleNamespace(key_cache=[]), torch.tensor([0]))  # no value_cache
    assert str(e.value) == "target: unsupported KV cache type SimpleNamespace"
