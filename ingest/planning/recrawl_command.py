"""What ``crawlbase_push`` and ``recrawl`` share: send the queued pushes in the
foreground with a progress bar, and say what happened in one line."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from ingest.planning.recrawl import RecrawlPlan
from ingest.pushing.models import Push
from ingest.pushing.services import PushingUnavailable, PushReport, pushes_send
from kbsite.progress import ProgressBar
from sources.models import Source


def plan_send(command: BaseCommand, plan: RecrawlPlan) -> None:
    """Send the pushes ``plan`` queued (and any others waiting), then summarize."""
    if plan.busy:
        raise CommandError(str(plan))
    total = Push.objects.filter(state=Push.State.QUEUED).count()
    bar = ProgressBar(command.stderr, label="pushed")

    def progress(report: PushReport) -> None:
        bar.update(report.pushed + report.failed, max(total, 1))

    try:
        report = pushes_send(progress=progress) if total else PushReport()
    except PushingUnavailable as exc:
        raise CommandError(f"{plan}; nothing sent: {exc}") from exc
    bar.close()
    if report is None:
        command.stdout.write(f"{plan}; another process is sending the pushes.")
        return
    command.stdout.write(f"{plan}; {report}.")
    if report.failed:
        raise CommandError(f"{report.failed} pushes failed; see Pushes in the admin.")


def source_named(name: str | None) -> Source | None:
    if name is None:
        return None
    source = Source.objects.filter(name=name).first()
    if source is None:
        known = ", ".join(Source.objects.values_list("name", flat=True)) or "none"
        raise CommandError(f"no source named {name!r} (sources: {known})")
    return source
