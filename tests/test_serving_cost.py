"""`--cost`: the round-cost model the settings sweep ranks by (ratios to one target decode step),
parsed from `NAME=VALUE` pairs, each malformed pair one line naming the flag."""

from __future__ import annotations

import pytest

from inspector.errors import InputError
from inspector.serving.cost import CostModel
from inspector.serving.spec import DraftSpec


def test_a_subset_sets_those_and_keeps_the_defaults():
    assert CostModel.parse(None) == CostModel() == CostModel.parse("")
    assert CostModel() == CostModel(draft=0.05, verify=1.0, per_token=0.0)
    m = CostModel.parse(" draft=0.1 , per-token=0.02")
    assert m == CostModel(draft=0.1, verify=1.0, per_token=0.02)
    assert CostModel.parse("verify=2,draft=0,per_token=0.5") == CostModel(0.0, 2.0, 0.5)
    assert CostModel.parse("verify=0,per_token=0.1") == CostModel(0.05, 0.0, 0.1)
    assert m.to_dict() == {"draft": 0.1, "verify": 1.0, "per_token": 0.02}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("draft", "'draft': NAME=VALUE, NAME one of draft, verify, per_token"),
        ("speed=1", "'speed=1': NAME=VALUE, NAME one of draft, verify, per_token"),
        ("draft=fast", "'draft=fast': 'fast' is not a number"),
        ("draft=1=2", "'draft=1=2': '1=2' is not a number"),
        ("verify=-1", "'verify=-1': a cost is not negative"),
        ("verify=0", "a round must cost something: verify > 0"),
        ("verify=0,per_token=0", "a round must cost something: verify > 0"),
    ],
)
def test_each_malformed_pair_is_one_line_naming_the_flag(text, says):
    with pytest.raises(InputError) as e:
        CostModel.parse(text)
    assert str(e.value) == f"--cost: {says}"


def test_a_rounds_cost_and_the_speedup():
    m = CostModel(draft=0.1, verify=1.0, per_token=0.05)
    chain, tree = DraftSpec(3), DraftSpec(3, 4, 8)
    assert m.verify_cost(1) == 1.0 and m.verify_cost(8) == pytest.approx(1.35)
    assert m.round_cost(chain) == pytest.approx(3 * 0.1 + 1.0 + 0.05 * 3)
    assert m.round_cost(tree) == pytest.approx(3 * 0.1 + 1.0 + 0.05 * 7)
    assert m.speedup(2.9, chain) == pytest.approx(2.9 / 1.45)
    assert m.speedup(None, chain) is None
