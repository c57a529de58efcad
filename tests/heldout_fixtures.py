"""Session fixtures of the held-out draft bed (tests/heldout.py), registered in conftest.py's
`pytest_plugins`: built once per test session (about 30 s of CPU), skipped where the bundled demo
is not built."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def heldout_bed(demo, tmp_path_factory):
    """The whole bed: the second target (`.second`: DemoPaths) and every case's draft
    (`.drafts`: name -> HeldOutDraft), with the build's seconds per stage (`.seconds`)."""
    import heldout

    return heldout.build_bed(tmp_path_factory.mktemp("heldout"), demo)


@pytest.fixture(scope="session")
def heldout_drafts(heldout_bed):
    """name -> HeldOutDraft, every case of heldout.CASES trained."""
    return heldout_bed.drafts


@pytest.fixture(scope="session")
def second_target(heldout_bed):
    """The second target's paths (.target: the HF folder, .train_samples: every layer)."""
    return heldout_bed.second
