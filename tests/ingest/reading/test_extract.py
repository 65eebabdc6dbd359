from __future__ import annotations

from ingest.reading.extract import html_to_page, markdown_title

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
    assert markdown.startswith("# Install {#install}\n"), "¶ gone, the id kept"
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
    assert markdown_title("text\n\n# First {#first}\n\n# Second") == "First"


def test_each_heading_keeps_the_id_of_its_section_for_links():
    _, markdown = html_to_page(
        "<main><section id='usage'><h2>Usage</h2><p>Text.</p></section>"
        "<div class='sect2' id='VACUUM-BASICS'><div class='titlepage'><div><div>"
        "<h3 class='title'>25.1.1. Vacuuming Basics</h3></div></div></div>"
        "<p>More.</p></div>"
        "<h3 id='own'>Own id</h3><p>x</p>"
        "<div id='many'><h3>First</h3><p>a</p><h3>Second</h3><p>b</p></div></main>"
    )

    assert "## Usage {#usage}" in markdown
    assert "### 25.1.1. Vacuuming Basics {#VACUUM-BASICS}" in markdown
    assert "### Own id {#own}" in markdown
    assert "### First {#many}" in markdown
    assert "### Second\n" in markdown, "an element is named by its first heading only"


def test_admonition_titles_are_not_headings():
    _, markdown = html_to_page(
        "<main><h2>Vacuum</h2><p>Text.</p><div class='tip'><h3 class='title'>Tip"
        "</h3><p>Run it often.</p></div></main>"
    )

    assert "**Tip**\n\nRun it often." in markdown
    assert "### Tip" not in markdown


def test_a_pages_own_table_of_contents_goes_unless_it_is_all_there_is():
    toc = "<div class='toc'><p><a href='#a'>25.1.1. Basics</a></p></div>"
    body = "<p>" + "Routine vacuuming keeps tables healthy. " * 10 + "</p>"

    _, with_body = html_to_page(f"<main><h2>Vacuum</h2>{toc}{body}</main>")
    _, toc_only = html_to_page(f"<main><h2>Chapter</h2>{toc}</main>")

    assert "25.1.1. Basics" not in with_body
    assert "25.1.1. Basics" in toc_only
