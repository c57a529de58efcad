"""Doctor findings' words and settings pinned where the doctor-check mutation sample found them
free (a finding whose sentence could move to its fix, a token count that reached no line)."""

from __future__ import annotations

from inspector.doctor.checks.skipped_samples import skipped_finding
from inspector.doctor.finding import Kind, Severity
from inspector.doctor.serving import engine_configs


def test_the_skipped_samples_finding_says_which_and_how_to_fix():
    f = skipped_finding({3: "data_3.pt: loss_mask: 10 entries for 12 tokens"}, 8)
    assert (f.kind, f.severity) == (Kind.SAMPLES, Severity.WARNING)
    assert f.summary == (
        "1 of 8 samples could not be scored: #3 data_3.pt: loss_mask: 10 entries for 12 tokens"
    )
    assert f.fix == "fix or remove those sample files"


def test_the_engine_configs_carry_the_draft_token_count():
    three = engine_configs([0, 2, 4], last_layer=6)
    five = engine_configs([0, 2, 4], last_layer=6, n_tokens=5)
    assert three == engine_configs([0, 2, 4], last_layer=6, n_tokens=3)
    assert three != five
    assert "5" in str(five) and "5" not in str(three).replace("0.5.23", "")


def test_a_norm_flag_that_fits_names_its_value():
    from inspector.doctor.checks.norm_flags import NORM_ENGINES, NormFacts, norm_flag_text
    from inspector.metrics import Counts

    flag = next(iter(NORM_ENGINES))
    facts = NormFacts(
        flag, True, ("input_norm.weight",), ("input_norm.weight",), Counts(7, 10), Counts(3, 10)
    )
    text = norm_flag_text(facts)
    assert text.summary.startswith(f"{flag}=true with its weights fits (")
    assert f"with {flag}=false" in text.summary


def test_the_fingerprint_json_keeps_three_decimals_of_the_slot_norms():
    from inspector.doctor.wiring.fingerprint import FingerprintFacts

    facts = FingerprintFacts(
        block_weight_norms=[1.234567],
        slot_norms=[12.345678, 0.0004],
        projected_norms=[[2.71828]],
        slots=["embed", "L2"],
        best_wiring=(0,),
        best_label="[embed]",
        best_projected=[3.14159],
    )
    d = facts.to_dict()
    assert d["slot_norms"] == [12.346, 0.0]
    assert d["block_weight_norms"] == [1.2346]
    assert d["projected_norms"] == [[2.718]] and d["best_projected"] == [3.142]


def test_config_ids_in_another_convention_that_match_no_slot_name_both_readings():
    """SGLang ids have two HF readings (before and since the engine's index change): the
    sentence names the convention and both, where HF ids are said as vLLM reads them."""
    from types import SimpleNamespace

    from inspector.doctor.checks.layer_ids import IdSource, LayerIdFacts
    from inspector.doctor.checks.wiring_check import _unmatched

    def facts(draft: IdSource) -> SimpleNamespace:
        slots = IdSource("data_config.json", (0, 2, 4, 6), "hf", True, ((0, 2, 4, 6),))
        ids = LayerIdFacts(draft=draft, slots=slots, slot_hf=(0, 2, 4, 6))
        return SimpleNamespace(layer_ids=ids, best=SimpleNamespace(wiring=(0, 1, 2)))

    sglang = IdSource("config.json", (8, 9, 10), "sglang", True, ((9, 10, 11), (8, 9, 10)))
    assert _unmatched(facts(sglang)) == (
        "its config.json [8, 9, 10] (SGLang ids (HF index = id + 1 before sglang PR #25454): "
        "HF [9, 10, 11] or [8, 9, 10]) match no captured slot: the slots are HF [0, 2, 4, 6] "
        "(data_config.json [0, 2, 4, 6] read as HF indices, as the file states)"
    )
    hf = IdSource("config.json", (8, 9, 10), "hf", True, ((8, 9, 10),))
    assert _unmatched(facts(hf)).startswith(
        "its config.json [8, 9, 10] (HF indices, as vLLM reads the key) match no captured slot"
    )
    short = IdSource("config.json", (8, 9), "hf", True, ((8, 9),))
    assert _unmatched(facts(short)) == "its config.json [8, 9] name 2 layers, but fc takes 3"
