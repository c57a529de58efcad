"""DSpark's keys (a DFlash backbone plus a Markov head and a confidence head), read from either
layout that writes them: speculators' (`speculators_model_type: "dspark"`, top-level keys,
`speculators.models.dspark.DSparkSpeculatorConfig`) and SpecForge's (`dflash_config.projector_type:
"dspark"`, the keys in `dflash_config` first, `specforge/modeling/draft/dspark.py`).

Their defaults differ, so each layout passes its own (`SPECULATORS`, `SPECFORGE`). Every
malformed field is one `InputError` naming the file and the key.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from inspector.formats.config import ConfigReader

# the Markov heads whose bias is read: "rnn" (a recurrent state over the block) is not
MARKOV_HEADS = ("vanilla", "gated")
# the one-line refusal of the commands that do not run a DSpark draft's blocks yet
DSPARK_FORWARD_MISSING = (
    "a DSpark draft: eval, accept, reconcile, the app and the doctor run its blocks; the live "
    "loop (accept --live) does not run its Markov head yet (docs/guides/block-drafts.md)"
)


@dataclass(frozen=True)
class DSparkDefaults:
    """A layout's defaults for DSpark's keys (absent in its config.json)."""

    anchor_drafts: bool  # sample_from_anchor
    markov_rank: int
    confidence: bool  # enable_confidence_head
    confidence_with_markov: bool


# speculators 0.9.0 (models/dspark/config.py): sample_from_anchor true, markov_rank 256, both
# confidence flags true
SPECULATORS = DSparkDefaults(True, 256, True, True)
# SpecForge (commit a6b6b02): its DSpark objective labels a block's B rows with x_{n+1}..x_{n+B}
# (algorithms/common/dflash_family_model.py `_build_dspark_labels_and_mask`): the anchor's row
# drafts. (Its draft class's own `_sample_draft_tokens` takes rows 1..: the weights follow the
# objective.) No Markov head without markov_rank; a confidence head where confidence_head_alpha > 0.
SPECFORGE = DSparkDefaults(True, 0, False, False)


def read_dspark_head(
    at: Callable[[str], ConfigReader], defaults: DSparkDefaults, hidden: int
) -> dict[str, object]:
    """The DSpark fields of `BlockConfig` (anchor_drafts, markov_rank, markov_head_type,
    confidence_input): `at(key)` is the reader that holds `key` in this layout."""
    r = at("sample_from_anchor")
    anchor = r.flag("sample_from_anchor", defaults.anchor_drafts)
    r = at("markov_rank")
    rank = r.get("markov_rank", defaults.markov_rank)
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise r.error("markov_rank", f"expected a non-negative integer, got {rank!r}")
    r = at("markov_head_type")
    kind = r.text("markov_head_type", "vanilla").lower()
    if rank and kind not in MARKOV_HEADS:
        raise r.error(
            "markov_head_type", f"{kind!r}: not supported (only {', '.join(MARKOV_HEADS)})"
        )
    r = at("enable_confidence_head")
    alpha = at("confidence_head_alpha").get("confidence_head_alpha", 0.0)
    confidence = r.flag(
        "enable_confidence_head",
        defaults.confidence or (isinstance(alpha, int | float) and alpha > 0),
    )
    with_markov = at("confidence_head_with_markov").flag(
        "confidence_head_with_markov", defaults.confidence_with_markov
    )
    if confidence and with_markov and not rank:
        raise at("confidence_head_with_markov").error(
            "confidence_head_with_markov", "true, but markov_rank is 0: no Markov row to add"
        )
    return {
        "anchor_drafts": anchor,
        "markov_rank": rank or None,
        "markov_head_type": kind if rank else None,
        "confidence_input": (hidden + (rank if with_markov else 0)) if confidence else None,
    }
