"""What an optimize run reports once its model is saved: the check's verdict, ``--latency``,
the printed table and summary, ``--explain``, and the ``--json`` and HTML reports (written
into the files the job's guard pinned when it claimed them).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from onnxfold.app.commands import OptimizeSettings
from onnxfold.app.failure_line import failing_named, rounding_hint
from onnxfold.app.optimize_save import Claimed, Saved, measure_latency_of
from onnxfold.app.signature import lines, signature
from onnxfold.errors import InputError
from onnxfold.host.points import reached
from onnxfold.io.tempfiles import write_text

if TYPE_CHECKING:
    from onnxfold.pipeline.report import Report
    from onnxfold.signature import Signature

CHECK_HINT = ("check        not run: --check 3 runs the output beside the original in "
              "onnxruntime and re-derives every folded tensor (docs/check.md)")
DRY_RUN_LINE = "dry run: nothing written (-o OUT to write)"


def report_run(claimed: Claimed, settings: OptimizeSettings, saved: Saved) -> int:
    """Report the run; its exit code (1: the check failed, and nothing was written)."""
    reached("published")
    report = saved.result.report
    report.phases = saved.phases.rounded()
    report.options.update(settings.reported())
    if _check_failed(claimed, settings, report, saved):
        return 1
    if saved.info is not None:
        report.output = saved.info.path
        report.external_data = saved.info.data_path
        report.output_bytes = saved.info.bytes_written
    latency = saved.latency
    if settings.report.latency and latency is None:  # a dry run's
        latency = measure_latency_of(claimed, settings, saved)
    if latency is not None:
        report.latency = latency.to_dict()
    shown = settings.report
    if (not shown.quiet or shown.json or shown.html) and saved.result.signature is not None:
        with saved.phases.phase("signature"):  # rendered where it is shown only
            report.signature = _signature(saved, saved.result.signature)
    report.phases = saved.phases.rounded()
    if not settings.report.quiet:  # the table and summary, then the check's verdict last
        print(report.summary(verbose=settings.report.verbose))
        if report.signature is not None:
            print("\n".join(lines(report.signature)))
        if latency is not None:
            print(latency.summary())
        if saved.check is not None:
            print(saved.check.summary())
        else:
            print(CHECK_HINT)
        if claimed.job.output is None:
            print(DRY_RUN_LINE)
    if settings.report.explain:
        print(report.explain())
    _write_reports(claimed, settings, report)
    return 0


def _check_failed(claimed: Claimed, settings: OptimizeSettings, report: Report,
                  saved: Saved) -> bool:
    """Record the check in the report; on failure print the table and the verdict, write
    ``--json`` and ``--report`` (the model is not written) and say so. Raises InputError
    (exit 2) after that when the check could not run."""
    check, not_run = saved.check, saved.not_run
    if check is not None:
        report.check = check.to_dict()
    elif not_run:
        report.check = {"ok": False, "state": "could not run", "reason": not_run}
    if report.check is None or report.check["ok"]:
        return False
    if not settings.report.quiet:
        print(report.summary())
    if check is not None:
        print(check.summary(verdict=False))  # the verdict is the line on stderr below
    _write_reports(claimed, settings, report)
    output = claimed.job.output
    where = f"nothing was written to {output}" if output is not None else \
        "dry run: nothing written"
    if not_run:
        raise InputError(f"the check could not run ({where}): {not_run}")
    assert check is not None
    print(f"onnxfold: check failed: {failing_named(check.failing)} outside tolerance; {where}"
          f"{rounding_hint(check)}", file=sys.stderr)
    return True


def _signature(saved: Saved, data: Signature) -> dict:
    """The signature of the input and the output (``onnxfold.app.signature``)."""
    written = saved.info.bytes_written if saved.info is not None else None
    return signature(data, written, saved.check, saved.compared())


def _write_reports(claimed: Claimed, settings: OptimizeSettings, report: Report) -> None:
    """``--json`` and ``--report``, when given (into the files the job's guard pinned)."""
    json_path, html_path = settings.report.json, settings.report.html
    if json_path or html_path:
        reached("reports")
    if json_path:
        write_text(claimed.guard.pinned(json_path), report.to_json() + "\n")
    if html_path:
        from onnxfold.app.report_html import render_html

        write_text(claimed.guard.pinned(html_path), render_html(report))
