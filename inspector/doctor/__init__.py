"""The doctor: find the wiring a draft was trained for, name every train/serve mismatch, give the fix.

    from inspector.doctor import diagnose
    report = diagnose(evaluator, n_samples=4, progress=lambda stage, done, total: ...)
    report.best_wiring, report.findings, report.serving_config, report.to_dict()

Checks (issue 5): wiring search, fc fingerprint, norm_before_residual / rope / head_dim
alternatives, vocab map, sample alignment, serving config; `write_fixed` writes a checkpoint whose
fc blocks are permuted for an engine's ascending capture order, verified by re-evaluating it.
The engine modules here never import textual.
"""

from inspector.doctor.diagnose import DEFAULT_SAMPLES, diagnose
from inspector.doctor.fix import write_fixed
from inspector.doctor.report import DoctorReport, Finding, WiringResult
from inspector.doctor.search import naive_search, search_wirings

__all__ = [
    "DEFAULT_SAMPLES",
    "DoctorReport",
    "Finding",
    "WiringResult",
    "diagnose",
    "naive_search",
    "search_wirings",
    "write_fixed",
]
