"""Doctor findings' words and settings pinned where the doctor-check mutation sample found them
free (a finding whose sentence could move to its fix, a token count that reached no line)."""

from __future__ import annotations

from inspector.doctor.finding import Kind, Severity
from inspector.doctor.serving import engine_configs
from inspector.doctor.skipped_samples import skipped_finding


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
    assert "5" in str(five) and "5" not in str(three).replace("25454", "")
