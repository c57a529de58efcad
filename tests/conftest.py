from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
GOLDEN = FIXTURES / "golden"


@pytest.fixture
def golden() -> Path:
    return GOLDEN


@pytest.fixture
def tiny_synthetic(tmp_path: Path) -> tuple[Path, Path]:
    from inspector.synthetic import SyntheticSpec, write_synthetic

    return write_synthetic(tmp_path / "syn", SyntheticSpec(size="tiny", n_samples=3, seq_len=40))
