"""The doctor: find the wiring a draft was trained for, name every train/serve mismatch, give the fix.

    from inspector.doctor import diagnose, write_fixed
    report = diagnose(evaluator, n_samples=4, progress=lambda stage, done, total: ...)
    report.recommended_wiring, report.findings, report.serving_config, report.to_dict()
    write_fixed(evaluator, report, "fixed-draft")  # -> FixResult, also in report.fixed

One check per module, each returning a `Finding` (docs/doctor.md lists them): `wiring_check`
(with the layer-id conventions of `layer_ids`), `fingerprint`, `config_alternatives`
(norm_before_residual / rope / head_dim), `vocab`, `alignment`, `serving`. `search` ranks the
wirings, `wording` words every finding, `fix` plans and writes the fixed checkpoint. The engine
modules here never import textual.
"""

from inspector.doctor.diagnose import DEFAULT_SAMPLES, diagnose
from inspector.doctor.fix import plan_fix, verify_fixed, write_fixed
from inspector.doctor.report import (
    ConfigFix,
    DoctorReport,
    Finding,
    FixPlan,
    FixResult,
    VocabRepair,
    WiringResult,
)
from inspector.doctor.search import search_wirings

__all__ = [
    "DEFAULT_SAMPLES",
    "ConfigFix",
    "DoctorReport",
    "Finding",
    "FixPlan",
    "FixResult",
    "VocabRepair",
    "WiringResult",
    "diagnose",
    "plan_fix",
    "search_wirings",
    "verify_fixed",
    "write_fixed",
]
