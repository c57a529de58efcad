"""One doctor for every view: `eagle-inspect doctor` and the app's doctor screen run the same
pipeline (`inspector.doctor.pipeline`), so the same inputs give the same report."""

from __future__ import annotations

import json
import threading

from inspector.cli import main
from inspector.commands.output import json_safe


def test_the_cli_and_the_app_give_the_same_report_on_the_demo(demo, capsys):
    from inspector.session import demo_inputs, load_evaluator
    from inspector.tui.evaluator_backend import EvaluatorBackend
    from inspector.tui.screens.doctor import DoctorFinished, doctor_job

    rc = main(["doctor", "--json", "--device", "cpu", "--samples", "4"])
    cli = json.loads(capsys.readouterr().out)

    # The app's evaluator as its loader builds it (strict), then the screen's own job.
    ev = load_evaluator(demo_inputs(), device="cpu")
    posted: list = []
    doctor_job(4, threading.Event(), posted.append)(EvaluatorBackend(ev))
    (done,) = [m for m in posted if isinstance(m, DoctorFinished)]
    report = done.outcome.report
    assert report is not None, done.outcome.error
    app = json.loads(json.dumps(json_safe(report.to_dict())[0]))

    cli.pop("seconds"), app.pop("seconds")  # wall-clock times
    assert app == cli
    assert len(cli["samples"]) == 4 and cli["findings"] and cli["wirings"]
    assert rc == (1 if report.has_errors else 0)
