from __future__ import annotations

from ingest.extract import html_to_page, markdown_title

DOC = """<!doctype html><html><head><title>Install — Example 1.0</title></head><body>
<header><a href="/">Example</a></header>
<nav><ul><li><a href="/a">Guide</a></li><li><a href="/b">API</a></li></ul></nav>
<div class="cookie-banner"><p>We use cookies.</p></div>
<div role="main">
<h1>Install<a class="headerlink" href="#install">¶</a></h1>
<p>Run the <a href="/cmd">installer</a>.</p>
<pre><code class="language-python">def main():

    return 1  # keeps its blank line and indentation
</code></pre>
<table><tr><th>Option</th><th>Default</th></tr><tr><td>debug</td><td>off</td></tr></table>
<ul><li>one</li><li>two</li></ul>
</div>
<aside>Related pages</aside><footer>© 2026 Example</footer>
</body></html>"""


def test_it_keeps_the_main_content_with_its_structure():
    title, markdown = html_to_page(DOC)

    assert title == "Install — Example 1.0"
    assert markdown.startswith("# Install\n"), "the permalink anchor is gone"
    assert "Run the [installer](/cmd)." in markdown, "links stay in the shown text"
    assert (
        "def main():\n\n    return 1  # keeps its blank line and indentation"
        in markdown
    )
    assert (
        "| Option | Default |\n| ------ | ------- |\n| debug  | off     |" in markdown
    )
    assert "- one\n- two" in markdown


def test_it_drops_navigation_header_footer_and_asides():
    _, markdown = html_to_page(DOC)

    for chrome in ["Guide", "Related pages", "© 2026", "Example</a>"]:
        assert chrome not in markdown


def test_a_source_selector_picks_the_content():
    _, markdown = html_to_page(DOC, selector=".cookie-banner")

    assert markdown.strip() == "We use cookies."


def test_a_selector_that_matches_nothing_falls_back_to_the_defaults():
    _, markdown = html_to_page(DOC, selector="#missing")

    assert "# Install" in markdown


def test_a_page_without_a_title_takes_its_first_heading():
    title, _ = html_to_page("<main><h1>Only heading</h1><p>x</p></main>")

    assert title == "Only heading"
    assert markdown_title("text\n\n# First\n\n# Second") == "First"
