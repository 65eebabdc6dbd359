"""One change as its readers see it: what a feed entry links to.

A feed is read by people who may never have an account in the admin (an
anonymous reader of a public source, a feed reader with a feed token), so an
entry links here rather than to the admin's diff: the page's title and address,
the summary, and the lines that changed, with no admin around them. Whoever may
read the change's source may read it (the feeds' rule); anyone else gets a 404,
or the login page while not signed in. Editors who may see the page in the admin
get a link to its full diff there.
"""

from __future__ import annotations

from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from kbsite.textdiff import markdown_diff
from sources.feeds import COMPARABLE, FeedError, feed_caller, feed_steps
from sources.models import Caller, Page, PageVersion, Source


@require_GET
def change_page(request: HttpRequest, change_id: int) -> HttpResponse:
    try:
        caller = feed_caller(request)
    except FeedError:
        caller = request.user
    step = feed_steps(caller).filter(pk=change_id).first()
    readable = Source.objects.searchable_by(caller)
    if step is None or not readable.filter(pk=step.page.source_id).exists():
        # The page's source now, too: a page may have moved since.
        if not caller.is_authenticated:
            return redirect_to_login(request.get_full_path())
        raise Http404("No such change.")
    diff = None
    if step.kind in COMPARABLE and _in_search_there(step):
        before = _version_before(step)
        texts = [_markdown(before), _markdown(step)]
        diff = markdown_diff(*texts)
    admin_diff = None
    if step.kind in COMPARABLE and _edits(caller, step.page.source_id):
        path = reverse("admin:sources_page_diff", args=[step.page_id])
        admin_diff = f"{path}?b={step.pk}"
    context = {"step": step, "page": step.page, "diff": diff, "admin_diff": admin_diff}
    return render(request, "sources/change.html", context)


def _edits(caller: Caller, source_id: int) -> bool:
    """Whether ``caller`` is an editor who sees the source in the admin."""
    if not getattr(caller, "is_staff", False):
        return False
    return Source.objects.visible_to(caller).filter(pk=source_id).exists()


def _in_search_there(step: PageVersion) -> bool:
    """Whether the page is still in search, in the source of ``step``: the
    lines of a page that left (a deny pattern is a promise its text is not
    served) or moved to another source are not shown."""
    page = step.page
    return page.status == Page.Status.LIVE and page.source_id == step.source_id


def _version_before(step: PageVersion) -> PageVersion | None:
    """The page's version just before ``step``, to compare with, if it holds
    content of the same source; else None (the step is compared with nothing)."""
    earlier = PageVersion.objects.filter(
        page_id=step.page_id, recorded_at__lte=step.recorded_at
    ).exclude(pk=step.pk)
    last = earlier.order_by("-recorded_at", "-pk").only("kind", "source_id").first()
    if last is None or last.kind not in COMPARABLE or last.source_id != step.source_id:
        return None
    return last


def _markdown(version: PageVersion | None) -> str:
    if version is None:
        return ""
    return PageVersion.objects.values_list("markdown", flat=True).get(pk=version.pk)
