"""Generated pages (indexes, search pages, source listings, noindex pages, link
lists) are crawled but kept out of answers; prose with many links is not."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from ingest.delivery.models import Delivery
from ingest.reading.generated import Kind, page_marked, page_not_content
from retrieval.embeddings import get_embedder
from retrieval.models import Chunk
from retrieval.reembed import index_rebuild
from retrieval.search import chunks_search
from sources.models import SYSTEM, Page, PageVersion
from tests.world import SITE, IngestWorld, page_html, run_queued


def not_content(*, url: str, html: str | None, markdown: str):
    """What the ingest finds of a page delivered as this HTML (None: Markdown)."""
    marked = None if html is None else page_marked(html)
    return page_not_content(url=url, marked=marked, markdown=markdown)


def sphinx(body: str, *, head: str = "", title: str = "Page") -> str:
    return (
        f"<html><head><title>{title}</title>{head}</head><body>"
        f'<div class="document"><div role="main">{body}</div></div>'
        '<div class="sphinxsidebar"><a href="index.html">Home</a></div></body></html>'
    )


GENINDEX = sphinx(
    '<h1 id="index">Index</h1><div class="genindex-jumpbox"><a href="#A">A</a></div>'
    '<table class="indextable genindextable"><tr><td><ul>'
    '<li><a href="usage.html#confval-zebra_mode">zebra_mode (configuration value)</a>'
    "</li></ul></td></tr></table>"
)
SPLIT_INDEX = sphinx(
    '<h1 id="index">Index &ndash; Z</h1><table style="width: 100%" class="indextable">'
    '<tr><td><ul><li><a href="usage.html#z">zebra_mode (in module conf)</a></li>'
    "</ul></td></tr></table>"
)
LISTING = f"{SITE}/_modules/zebra/modes.html"
MODINDEX = sphinx(
    '<h1>Python Module Index</h1><table class="indextable modindextable">'
    '<tr><td><a href="zebra.html"><code class="xref">zebra</code></a></td></tr>'
    "</table>"
)
SEARCH = sphinx(
    '<h1 id="search-documentation">Search</h1><p>Search for zebra_mode here.</p>'
    '<div id="search-results"></div>',
    head='<script src="searchindex.js"></script>',
)
SOURCE_LISTING = sphinx(
    '<h1>Source code for zebra.modes</h1><div class="highlight"><pre>'
    "def zebra_mode(stripes):\n    return stripes * 2\n</pre></div>"
)
NOINDEX = sphinx(
    "<h1>Draft</h1><p>The zebra_mode option turns stripes on.</p>",
    head='<meta name="ROBOTS" content="NoIndex, follow">',
)
INDEXABLE = sphinx(
    "<h1>Draft</h1><p>The zebra_mode option turns stripes on.</p>",
    head='<meta name="robots" content="index, follow">',
)
# A theme's chrome on every page: a search box's results in the header (Just the
# Docs), a navigation wrapper named "index".
THEMED = (
    "<html><head><title>Configuration</title></head><body><header>"
    '<div id="search-results" class="search-results"></div></header>'
    '<nav><div class="index"><a href="a.html">A</a></div></nav>'
    "<main><h1>Configuration</h1><p>Set zebra_mode to draw stripes.</p></main>"
    "</body></html>"
)
CONTENTS = "# Guide\n\n" + "\n".join(
    f"- [Chapter {n}: stripes and zebra modes]({SITE}/ch{n}.html)" for n in range(8)
)
# Prose about functions, with many of them linked (0.7 of its words).
LINKED_PROSE = (
    "# Ranges\n\n"
    + " ".join(f"[zebra_range_{n} of stripes]({SITE}/f{n}) is" for n in range(12))
    + " the set of functions on ranges, each returning a new range."
)


@pytest.mark.parametrize(
    ("url", "html", "markdown", "kind"),
    [
        (f"{SITE}/genindex.html", GENINDEX, "", Kind.INDEX),
        (f"{SITE}/genindex-Z.html", SPLIT_INDEX, "", Kind.INDEX),
        (f"{SITE}/py-modindex.html", MODINDEX, "", Kind.INDEX),
        (f"{SITE}/search.html", SEARCH, "Search for zebra_mode here.", Kind.SEARCH),
        (LISTING, SOURCE_LISTING, "", Kind.SOURCE_LISTING),
        # Delivered as Markdown: the path alone tells a listing.
        (LISTING, None, "def zebra_mode()", Kind.SOURCE_LISTING),
        (f"{SITE}/elsewhere/modes.html", SOURCE_LISTING, "", Kind.SOURCE_LISTING),
        (f"{SITE}/draft.html", NOINDEX, "The zebra_mode option.", Kind.NOINDEX),
        (f"{SITE}/guide/", None, CONTENTS, Kind.LINKS),
    ],
)  # fmt: skip
def test_a_generated_page_is_recognised_with_its_reason(url, html, markdown, kind):
    found = not_content(url=url, html=html, markdown=markdown)

    assert found is not None and found.kind == kind
    assert found.reason


@pytest.mark.parametrize(
    ("url", "html", "markdown"),
    [
        (f"{SITE}/draft.html", INDEXABLE, "The zebra_mode option turns stripes on."),
        (f"{SITE}/functions-range.html", None, LINKED_PROSE),
        # A page about searching, named so, without the search page's markers.
        (f"{SITE}/search.html", sphinx("<h1>Search</h1><p>Full text.</p>"), "x"),
        (f"{SITE}/_modules_guide/zebra.html", None, "How modules work."),
        (f"{SITE}/configuration.html", THEMED, "Set zebra_mode to draw stripes."),
        (f"{SITE}/tutorial.html", sphinx("<h1>Source code for the tutorial</h1>"), "x"),
        (f"{SITE}/short/", None, "- [One](a)\n- [Two](b)"),
    ],
)
def test_written_pages_are_content(url, html, markdown):
    assert not_content(url=url, html=html, markdown=markdown) is None


class GeneratedPageIngestTests(IngestWorld):
    def setUp(self):
        self.admin = User.objects.create_superuser("admin", "a@example.com", "pw")

    def test_a_generated_index_is_live_without_chunks_and_says_why(self):
        delivery = self.ingest(f"{SITE}/genindex.html", GENINDEX)

        page = self.page(f"{SITE}/genindex.html")
        assert page.status == Page.Status.LIVE
        assert page.not_indexed_reason == "a generated index of the site's terms"
        assert not page.chunks.exists()
        assert "kept out of answers" in delivery.error
        assert page.versions.get().kind == PageVersion.Kind.NEW

    def test_a_term_only_a_generated_page_holds_finds_nothing(self):
        self.ingest(f"{SITE}/genindex.html", GENINDEX)
        self.ingest(f"{SITE}/_modules/zebra/modes.html", SOURCE_LISTING)

        result = chunks_search(query="zebra_mode", user=SYSTEM, k=5)
        assert result.hits == []

    def test_an_unchanged_generated_page_is_only_verified(self):
        self.ingest(f"{SITE}/genindex.html", GENINDEX)
        again = self.ingest(f"{SITE}/genindex.html", GENINDEX)

        assert again.outcome == Delivery.Outcome.UNCHANGED
        assert self.page(f"{SITE}/genindex.html").versions.count() == 1

    def test_a_page_indexed_before_it_was_known_as_generated_leaves_answers(self):
        self.ingest(f"{SITE}/genindex.html", GENINDEX)
        page = self.page(f"{SITE}/genindex.html")
        # As an earlier version of the product left it: indexed, no reason, read
        # by other code (no key of its reading).
        Page.objects.filter(pk=page.pk).update(not_indexed_reason="", reading_key="")
        Chunk.objects.create(page=page, position=0, text="zebra_mode", embed_hash="0")

        again = self.ingest(f"{SITE}/genindex.html", GENINDEX)

        page.refresh_from_db()
        assert again.outcome == Delivery.Outcome.UNCHANGED, "the site did not change"
        assert page.not_indexed_reason and not page.chunks.exists()
        assert page.versions.count() == 1

    def test_a_source_that_indexes_source_listings_answers_from_them(self):
        url = f"{SITE}/_modules/zebra/modes.html"
        self.ingest(url, SOURCE_LISTING)
        assert not self.page(url).chunks.exists()

        self.client.force_login(self.admin)
        with self.captureOnCommitCallbacks(execute=True):
            response = self.client.post(
                f"/admin/sources/source/{self.source.pk}/change/",
                {**self.source_form(), "index_source_listings": "on"},
                follow=True,
            )
        shown = response.content.decode()
        assert "1 pages will be read again" in shown, (
            response.context.get("adminform")
            and response.context["adminform"].form.errors
        )
        run_queued("ingest.tasks.source_pages_rederive_task")

        page = self.page(url)
        assert page.not_indexed_reason == ""
        assert page.chunks.exists()
        assert chunks_search(query="zebra_mode stripes", user=SYSTEM, k=5).hits

    def test_a_prose_page_beside_generated_ones_is_answered_from(self):
        self.ingest(f"{SITE}/genindex.html", GENINDEX)
        self.ingest(
            f"{SITE}/usage.html",
            page_html("Usage", ("Zebra mode", "Set zebra_mode to draw stripes.")),
        )

        hits = chunks_search(query="zebra_mode", user=SYSTEM, k=5).hits
        assert [h.chunk.page.url for h in hits] == [f"{SITE}/usage.html"]

    def test_the_admin_lists_the_live_pages_kept_out_with_their_reason(self):
        self.ingest(f"{SITE}/genindex.html", GENINDEX)
        self.ingest(f"{SITE}/py-modindex.html", MODINDEX)
        Page.objects.filter(url=f"{SITE}/py-modindex.html").update(
            status=Page.Status.GONE
        )
        self.client.force_login(self.admin)

        listed = self.client.get("/admin/sources/page/?condition=kept_out")
        page = self.page(f"{SITE}/genindex.html")
        shown = self.client.get(f"/admin/sources/page/{page.pk}/change/")

        assert [p.url for p in listed.context["cl"].result_list] == [page.url]
        assert "a generated index of the site&#x27;s terms" in shown.content.decode()

    def test_rebuilding_the_index_leaves_generated_pages_out(self):
        self.ingest(f"{SITE}/genindex.html", GENINDEX)
        self.ingest(f"{SITE}/usage.html", page_html("Usage", ("Zebra", "Stripes.")))

        for _ in index_rebuild(target=get_embedder()):
            pass

        assert not self.page(f"{SITE}/genindex.html").chunks.exists()
        assert self.page(f"{SITE}/usage.html").chunks.exists()

    def source_form(self) -> dict:
        """The source's change form as the admin shows it, unchanged."""
        form = self.client.get(f"/admin/sources/source/{self.source.pk}/change/")
        fields = form.context["adminform"].form
        data = {}
        for name, field in fields.fields.items():
            value = fields[name].value()
            if value is None or value is False:
                continue
            if isinstance(value, list):
                data[name] = value
            else:
                data[name] = field.widget.format_value(value) or value
        return data
