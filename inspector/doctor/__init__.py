"""The doctor: find the wiring a draft was trained for, name every train/serve mismatch, give the fix.

    from inspector.doctor import DoctorRequest, run, run_loaded
    report = run(DoctorRequest(checkpoint, target=...), load, progress=...)  # the CLI
    report = run_loaded(evaluator, n_samples=4, progress=...)                # the app
    report.recommended_wiring, report.findings, report.serving_config, report.to_dict()

`pipeline.run` is the one entry every view calls (preflight, `diagnose`, `--write-fixed`).
One check per module, each owning its facts, its run, its severity and its words (docs/doctor.md
lists them): `slot_identity`, `target_data`, `final_state`, `vocab`, `skipped_samples`,
`alignment`, `config_alternatives` (norm_before_residual / rope / head_dim, over the
`config_variants`), `norm_flags`, `lm_head`, `wiring_check` (with the layer-id readings of
`layer_ids` and the `named_wirings`), `fingerprint`, `serving`, `long_context`. `search` ranks
the wirings, `diagnose` runs the checks over one `DoctorContext`, `fix` plans and writes the
fixed checkpoint. `finding` and `phrasing` are leaves every check imports; nothing imports a
check's words back. The engine modules here never import textual.
"""

from inspector.doctor.context import DEFAULT_SAMPLES, DiagnoseSettings, DoctorContext
from inspector.doctor.diagnose import diagnose
from inspector.doctor.finding import Kind, Severity
from inspector.doctor.fix import plan_fix, verify_fixed, write_fixed
from inspector.doctor.pipeline import DoctorRequest, run, run_loaded
from inspector.doctor.report import (
    ConfigFix,
    DoctorReport,
    Finding,
    FixPlan,
    FixResult,
    VocabRepair,
    WiringResult,
)
from inspector.doctor.serving import ServingConfig
from inspector.doctor.wiring.search import search_wirings

__all__ = [
    "DEFAULT_SAMPLES",
    "ConfigFix",
    "DiagnoseSettings",
    "DoctorContext",
    "DoctorReport",
    "DoctorRequest",
    "Finding",
    "FixPlan",
    "FixResult",
    "Kind",
    "ServingConfig",
    "Severity",
    "VocabRepair",
    "WiringResult",
    "diagnose",
    "plan_fix",
    "run",
    "run_loaded",
    "search_wirings",
    "verify_fixed",
    "write_fixed",
]
