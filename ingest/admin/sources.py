"""Ingest's part of the editors' source admin: crawl buttons and actions, tokens
spent, and an overview of the source's pages, index, deliveries and fetcher
settings. The admin registered for ``Source`` (``kbsite.admin``) puts it before the
sources app's part, whose queryset, saves and URLs it extends."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.options import IS_POPUP_VAR
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Count, OuterRef, QuerySet, Subquery, Sum
from django.db.models.functions import Coalesce
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.timesince import timeuntil
from django.views.decorators.http import require_POST

from ingest.crawl.admin import progress_html, status_html
from ingest.crawl.claims import hosts_paused
from ingest.crawl.progress import crawl_progress
from ingest.crawl.robots import origin_of
from ingest.delivery.models import Delivery
from ingest.delivery.rederive import READING_FIELDS, source_reading_changed
from ingest.fetchers.kinds import fetcher_kind
from ingest.notify.models import Subscription
from ingest.planning.admin import plan_report, seeds_report
from ingest.planning.recrawl import RECRAWL_PERMISSION, recrawl_due, source_crawl_start
from ingest.publish.services import publish_check_request
from ingest.stats import counts as stats
from kbsite.admin_utils import ago, number, tokens_cost
from sources.models import PageVersion, Source


def fetcher_problems(source: Source) -> list[str]:
    """Settings the source's fetcher needs and does not have."""
    needed = fetcher_kind(source).settings_needed
    return [f"{name} is not set" for name in needed if not getattr(settings, name)]


def fetcher_advice(source: Source) -> list[str]:
    """Settings the source's fetcher works without but would be better with."""
    advice = fetcher_kind(source).settings_advised
    return [f"set {name}: {why}" for name, why in advice if not getattr(settings, name)]


# Crawls the overview looks at: the latest few, where any still running is.
CRAWLS_SHOWN = 5
OVERVIEW = ["pages_overview", "crawl_overview", "last_error", "index_overview",
            "changes_overview", "last_delivery",
            "last_check", "hosts_paused", "callback_url",
            "fetcher_status", "subscriptions"]  # fmt: skip
# A change to these may change what the source's crawl can fetch.
SEED_FIELDS = {"seed_urls", "sitemap_url", "fetcher", "allow_patterns",
               "deny_patterns"}  # fmt: skip


# Each kind of change in a word, in the order a summary lists them.
KIND_WORDS = {
    PageVersion.Kind.NEW: "new", PageVersion.Kind.CHANGED: "changed",
    PageVersion.Kind.DELETED: "gone", PageVersion.Kind.RESTORED: "back",
    PageVersion.Kind.MOVED: "moved", PageVersion.Kind.DUPLICATE: "duplicates",
    PageVersion.Kind.OUT_OF_SCOPE: "out of scope",
}  # fmt: skip


class CrawlingSourceAdmin(admin.ModelAdmin):
    """Its columns (``tokens_week``) and read-only fields (``OVERVIEW``) are listed
    by the composed admin, beside the sources app's."""

    actions = ["check_for_changes", "crawl_now", "recrawl_due_pages"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Source]:
        week = Delivery.objects.filter(
            page__source=OuterRef("pk"),
            received_at__gte=timezone.now() - stats.WEEK,
        ).order_by()
        tokens = week.values("page__source").annotate(t=Sum("embedding_tokens"))
        return (
            super()
            .get_queryset(request)
            .annotate(_tokens_week=Coalesce(Subquery(tokens.values("t")), 0))
        )

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        """The overview first on an existing source; every other field after it,
        whatever fields the model gains."""
        fields = [f for f in self.get_fields(request, obj) if f not in OVERVIEW]
        if obj is None:
            return [(None, {"fields": fields})]
        return [("Overview", {"fields": OVERVIEW}), ("Settings", {"fields": fields})]

    def save_model(
        self, request: HttpRequest, obj: Any, form: Any, change: bool
    ) -> None:
        super().save_model(request, obj, form, change)
        if not change or set(form.changed_data) & SEED_FIELDS:
            # Host names are resolved: not inside the admin's transaction.
            transaction.on_commit(lambda: seeds_report(self, request, obj), robust=True)
        if not change:
            plan = source_crawl_start(source=obj)
            plan_report(self, request, plan, what="First crawl")
        elif set(form.changed_data) & set(READING_FIELDS):
            count = source_reading_changed(source=obj)
            self.message_user(
                request,
                f"{count:,} pages will be read again from their stored bodies "
                "under the new settings (no crawl; only new text is embedded).",
            )

    def response_add(
        self, request: HttpRequest, obj: Any, post_url_continue: str | None = None
    ) -> HttpResponse:
        """A new source opens on its overview, where its first crawl's progress
        and errors show (unless the editor asked to add another)."""
        response = super().response_add(request, obj, post_url_continue)
        if "_addanother" in request.POST or IS_POPUP_VAR in request.POST:
            return response
        return self._back(obj)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        source = self.get_object(request, object_id)
        buttons = self.crawl_buttons(request, source) if source else []
        context = {**(extra_context or {}), "crawl_buttons": buttons}
        return super().change_view(request, object_id, form_url, context)

    def crawl_buttons(self, request: HttpRequest, source: Source) -> list[dict]:
        """The crawl actions of the source's page: only those its fetcher can do,
        for editors who may change sources."""
        if not self.has_recrawl_permission(request):
            return []
        return [
            {"url": reverse("admin:sources_source_check", args=[source.pk]),
             "label": "Check for changes now"},
            {"url": reverse("admin:sources_source_crawl_now", args=[source.pk]),
             "label": "Crawl now (from the seeds)"},
        ]  # fmt: skip

    def get_urls(self) -> list[Any]:
        def view(func: Any) -> Any:
            return self.admin_site.admin_view(require_POST(func))

        return [
            path("<path:object_id>/check/", view(self.check_view),
                 name="sources_source_check"),
            path("<path:object_id>/crawl-now/", view(self.crawl_now_view),
                 name="sources_source_crawl_now"),
            *super().get_urls(),
        ]  # fmt: skip

    def check_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        source = self._changeable(request, object_id)
        self._check_report(request, source)
        return self._back(source)

    def crawl_now_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        source = self._changeable(request, object_id)
        plan_report(self, request, source_crawl_start(source=source))
        seeds_report(self, request, source)
        return self._back(source)

    def _check_report(self, request: HttpRequest, source: Source) -> None:
        """Queue a check of the source for changes, and say what it will do."""
        check, created = publish_check_request(source=source, user=request.user)
        if created:
            self.message_user(request, f"Check for changes: {check.summary()}")
            return
        self.message_user(
            request,
            f"A check of {source} for changes is already queued (asked "
            f"{check.requests:,} times): this request joined it, nothing was added.",
            messages.WARNING,
        )

    def _changeable(self, request: HttpRequest, object_id: str) -> Source:
        source = self.get_object(request, object_id)
        if source is None:
            raise Http404("No source with this id.")
        if not self.has_recrawl_permission(request):
            raise PermissionDenied
        return source

    def has_recrawl_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(RECRAWL_PERMISSION)

    def _back(self, source: Source) -> HttpResponse:
        return HttpResponseRedirect(
            reverse("admin:sources_source_change", args=[source.pk])
        )

    # -- list columns and the overview ------------------------------------------

    @admin.display(description="tokens, 7 days", ordering="_tokens_week")
    def tokens_week(self, obj: Any) -> str:
        return number(obj._tokens_week)

    def _overview(self, obj: Any) -> stats.SourceOverview:
        if not hasattr(obj, "_overview_cache"):
            obj._overview_cache = stats.source_overview(source=obj, now=timezone.now())
        return obj._overview_cache

    @admin.display(description="pages")
    def pages_overview(self, obj: Source) -> str:
        o = self._overview(obj)
        pages = reverse("admin:sources_page_changelist")
        link = f"{pages}?source__id__exact={obj.pk}"
        return format_html(
            '<a href="{}&amp;status__exact=live">{} live</a> · '
            '<a href="{}&amp;condition=stale">{} stale</a> (not verified within '
            'their interval) · <a href="{}&amp;condition=failing">{} failing</a> · '
            '<a href="{}&amp;condition=tombstoned">{} gone</a> · {} redirected · '
            '<a href="{}&amp;condition=pending">{} waiting for a first crawl</a>',
            link, number(o.live), link, number(o.stale), link, number(o.failing),
            link, number(o.gone), number(o.redirected), link, number(o.pending),
        )  # fmt: skip

    @admin.display(description="index")
    def index_overview(self, obj: Source) -> str:
        o = self._overview(obj)
        week, ever = tokens_cost(o.tokens_week), tokens_cost(o.tokens_ever)
        return format_html(
            "{} chunks · {} tokens embedded in the last 7 days{} · {} ever{}",
            number(o.chunks),
            number(o.tokens_week),
            f" (≈ {week})" if week else "",
            number(o.tokens_ever),
            f" (≈ {ever})" if ever else "",
        )

    @admin.display(description="changes")
    def changes_overview(self, obj: Source) -> str:
        """What the last week's crawls changed, linked to the list of changes."""
        week = timezone.now() - timedelta(days=7)
        steps = PageVersion.objects.filter(source=obj, recorded_at__gte=week)
        kinds = dict(steps.values_list("kind").annotate(n=Count("pk")).order_by())
        url = reverse("admin:sources_pageversion_changelist")
        if not kinds:
            return format_html(
                'No page changed in the last 7 days (<a href="{}?source__id__exact={}">'
                "every change</a>).",
                url, obj.pk,
            )  # fmt: skip
        parts = ", ".join(
            f"{kinds[kind]} {word}"
            for kind, word in KIND_WORDS.items()
            if kind in kinds
        )
        return format_html(
            '<a href="{}?source__id__exact={}&recorded_at__gte={}">{} page change{} '
            "in the last 7 days</a>: {}",
            url, obj.pk, week.date().isoformat(), sum(kinds.values()),
            "" if sum(kinds.values()) == 1 else "s", parts,
        )  # fmt: skip

    @admin.display(description="last delivery")
    def last_delivery(self, obj: Source) -> str:
        delivery = self._overview(obj).last_delivery
        if delivery is None:
            return "None yet."
        url = reverse("admin:ingest_delivery_change", args=[delivery.pk])
        return format_html(
            '<a href="{}">{}</a>, {}: {}',
            url,
            delivery.url,
            ago(delivery.received_at),
            delivery.get_outcome_display() or delivery.get_state_display(),
        )

    @admin.display(description="crawl")
    def crawl_overview(self, obj: Source) -> str:
        """Every crawl still fetching or indexing (a crawl of due pages beside a
        first crawl still indexing shows both), else the latest: status, fetched,
        indexed, left, the time left. While one runs the page refreshes it."""
        if not fetcher_kind(obj).crawled_here:
            return "— (Crawlbase crawls this source: see Ingest → Pushes to Crawlbase)"
        latest = obj.crawls.order_by("-started_at", "-pk")[:CRAWLS_SHOWN]
        crawls = [(crawl, crawl_progress(crawl=crawl)) for crawl in latest]
        if not crawls:
            return "None yet: Crawl now starts one."
        active = [
            (crawl, progress) for crawl, progress in crawls if not progress.finished
        ]
        lines = format_html_join(
            mark_safe("<br>"),
            '<a href="{}">{}</a>, started {}: {} · {}',
            (
                (reverse("admin:ingest_crawl_change", args=[crawl.pk]), crawl,
                 ago(crawl.started_at), status_html(progress), progress_html(progress))
                for crawl, progress in active or crawls[:1]
            ),
        )  # fmt: skip
        return format_html(
            '<div class="kb-crawls" data-live="{}">{}</div>',
            "1" if active else "",
            lines,
        )

    @admin.display(description="last error")
    def last_error(self, obj: Source) -> str:
        """The newest of the failing pages' errors and the latest crawl's."""
        problem = self._overview(obj).last_error
        if problem is None:
            return "None: no page is failing and the latest crawl had no error."
        if problem.page_id is not None:
            url = reverse("admin:sources_page_change", args=[problem.page_id])
        else:
            url = reverse("admin:ingest_crawlurl_change", args=[problem.crawl_url_id])
        return format_html(
            '<a href="{}">{}</a>, {}: <strong class="kb-warning">{}</strong>',
            url, problem.title or problem.url, ago(problem.at), problem.error,
        )  # fmt: skip

    @admin.display(description="last check for changes")
    def last_check(self, obj: Source) -> str:
        check = obj.publish_checks.order_by("-requested_at", "-pk").first()
        tokens = obj.publish_tokens.filter(revoked_at=None).count()
        token_list = reverse("admin:ingest_publishtoken_changelist")
        token_add = reverse("admin:ingest_publishtoken_add")
        tokens_link = format_html(
            '<a href="{}?source__id__exact={}">{} active publish token{}</a> '
            '(for a CI step after a deploy: <a href="{}?source={}">make one</a>)',
            token_list, obj.pk, tokens, "" if tokens == 1 else "s", token_add, obj.pk,
        )  # fmt: skip
        if check is None:
            return format_html("None yet. {}", tokens_link)
        url = reverse("admin:ingest_publishcheck_change", args=[check.pk])
        return format_html(
            '<a href="{}">{}</a>: {} {}',
            url, ago(check.requested_at), check.summary(), tokens_link,
        )  # fmt: skip

    @admin.display(description="hosts paused")
    def hosts_paused(self, obj: Source) -> str:
        """Hosts of the source's seeds that asked for a wait beyond
        CRAWL_MAX_DELAY, and why (the built-in crawler's own pause)."""
        origins = sorted({origin_of(seed) for seed in obj.seeds})
        reasons = hosts_paused(origins=origins)
        if not reasons:
            return "None."
        return format_html('<strong class="kb-warning">{}</strong>', "; ".join(reasons))

    @admin.display(description="callback URL for Crawlbase")
    def callback_url(self, obj: Source) -> str:
        """What to paste into the crawler's settings at Crawlbase (the token is
        WEBHOOK_TOKEN, masked here)."""
        if not fetcher_kind(obj).delivers_by_webhook:
            return f"— (this source's fetcher is {obj.get_fetcher_display()})"
        token = settings.WEBHOOK_TOKEN
        shown = f"{token[:4]}…" if token else "(WEBHOOK_TOKEN is not set)"
        path_ = reverse("ingest:crawlbase-webhook")
        return format_html(
            "<code>{}{}?token={}</code>", settings.PUBLIC_URL, path_, shown
        )

    @admin.display(description="fetcher settings")
    def fetcher_status(self, obj: Source) -> str:
        """Red only for what stops the fetcher; advice reads as advice."""
        problems, advice = fetcher_problems(obj), fetcher_advice(obj)
        parts = []
        if problems:
            parts.append(
                format_html(
                    '<strong class="kb-warning">Missing: {}</strong> (nothing is '
                    "fetched until then).",
                    "; ".join(problems),
                )
            )
        else:
            parts.append(format_html("{}", "Complete."))
        if advice:
            parts.append(format_html("<span>Advice: {}.</span>", "; ".join(advice)))
        return format_html_join(" ", "{}", ((part,) for part in parts))

    @admin.display(description="subscriptions")
    def subscriptions(self, obj: Source) -> str:
        """Who hears about the source's changes, and a link to add someone."""
        rows = Subscription.objects.filter(source=obj)
        count, disabled = rows.count(), rows.exclude(disabled_at=None).count()
        listing = reverse("admin:ingest_subscription_changelist")
        add = reverse("admin:ingest_subscription_add")
        return format_html(
            '<a href="{}?source__id__exact={}">{} subscription{}</a> (webhooks and '
            'e-mail digests of its changes){} · <a href="{}?source={}">add one</a>',
            listing, obj.pk, number(count), "s" if count != 1 else "",
            format_html(', <strong class="kb-warning">{} disabled</strong>', disabled)
            if disabled else "",
            add, obj.pk,
        )  # fmt: skip

    # -- actions on many sources -------------------------------------------------

    @admin.action(
        description="Check the selected sources for changes now",
        permissions=["recrawl"],
    )
    def check_for_changes(
        self, request: HttpRequest, queryset: QuerySet[Source]
    ) -> None:
        for source in queryset:
            self._check_report(request, source)

    @admin.action(
        description="Crawl the selected sources now (from their seeds)",
        permissions=["recrawl"],
    )
    def crawl_now(self, request: HttpRequest, queryset: QuerySet[Source]) -> None:
        for source in queryset:
            plan_report(self, request, source_crawl_start(source=source))
            seeds_report(self, request, source)

    @admin.action(
        description="Recrawl the due pages of the selected sources",
        permissions=["recrawl"],
    )
    def recrawl_due_pages(
        self, request: HttpRequest, queryset: QuerySet[Source]
    ) -> None:
        for source in queryset:
            plan = recrawl_due(source=source)
            if plan.selected or plan.busy:
                plan_report(self, request, plan)
                continue
            self.message_user(request, _nothing_due(source), messages.WARNING)


def _nothing_due(source: Source) -> str:
    """Why the due pages' recrawl did nothing, and what would."""
    upcoming = source.pages.exclude(next_crawl_at=None).order_by("next_crawl_at")
    nxt = upcoming.values_list("next_crawl_at", flat=True).first()
    when = f"the next is due in {timeuntil(nxt)}" if nxt else "none is scheduled"
    return (
        f"No page of {source} is due ({when}). To look at every page now, after "
        "publishing, use Check the selected sources for changes now."
    )
