from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["heldout_fixtures", "block_fixtures"]

FIXTURES = Path(__file__).parent / "fixtures"
GOLDEN = FIXTURES / "golden"


@pytest.fixture
def golden() -> Path:
    return GOLDEN


@pytest.fixture
def tiny_synthetic(tmp_path: Path) -> tuple[Path, Path]:
    from inspector.synthetic import SyntheticSpec, write_synthetic

    return write_synthetic(tmp_path / "syn", SyntheticSpec(size="tiny", n_samples=3, seq_len=40))


@pytest.fixture(scope="session")
def demo():
    """The bundled demo's paths (skips when the demo is not built)."""
    from inspector.demo_paths import demo_paths
    from inspector.errors import InputError

    try:
        return demo_paths()
    except InputError:
        pytest.skip("bundled demo not built")


@pytest.fixture(scope="module")
def one_thread():
    """Tiny drafts: one torch thread beats several fighting over busy cores (10x here). A test
    module takes it with `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
