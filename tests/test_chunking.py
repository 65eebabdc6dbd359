from __future__ import annotations

from kbsite.text import clean_inline, count_tokens
from retrieval.chunking import MAX_TOKENS, chunk_markdown

PAGE = """Intro before any heading.

# Install

## Requirements

You need Python 3.11.

```sh
# not a heading: inside a fence
pip install example
```

## Configure

| Setting | Default |
| ------- | ------- |
| DEBUG   | false   |

### Advanced

See [the reference](https://docs.example.com/ref/) for more ¶.
"""


def hashes(markdown: str, title: str = "Example") -> list[str]:
    return [c.embed_hash for c in chunk_markdown(markdown, title=title)]


def test_it_cuts_at_h1_to_h3_and_never_inside_a_fence():
    chunks = chunk_markdown(PAGE, title="Example")

    assert [c.heading for c in chunks] == [
        "",
        "Install › Requirements",
        "Install › Configure",
        "Install › Configure › Advanced",
    ]
    assert "# not a heading: inside a fence\npip install example" in chunks[1].text
    assert [c.position for c in chunks] == [0, 1, 2, 3]


def test_a_heading_with_no_text_of_its_own_lives_on_in_the_path():
    assert all(c.text != "# Install" for c in chunk_markdown(PAGE))


def test_tables_and_code_survive_intact():
    chunks = chunk_markdown(PAGE)

    assert "| Setting | Default |\n| ------- | ------- |\n| DEBUG   | false   |" in (
        chunks[2].text
    )


def test_the_embedded_text_has_title_and_path_but_no_link_targets():
    advanced = chunk_markdown(PAGE, title="Example")[3]

    assert advanced.embed_text.startswith(
        "Example › Install › Configure › Advanced\n\n"
    )
    assert "See the reference for more." in advanced.embed_text
    assert "https://" not in advanced.embed_text and "¶" not in advanced.embed_text
    assert "[the reference](https://docs.example.com/ref/)" in advanced.text
    assert advanced.token_count == count_tokens(advanced.embed_text)


def test_an_edit_in_one_section_changes_only_that_sections_chunk():
    before = hashes(PAGE)
    after = hashes(PAGE.replace("Python 3.11", "Python 3.12"))

    assert [b == a for b, a in zip(before, after, strict=True)] == [
        True, False, True, True,
    ]  # fmt: skip


def test_reordering_sections_keeps_every_chunk_text():
    one = "# Guide\n\n## Alpha\n\nFirst part.\n\n## Beta\n\nSecond part.\n"
    two = "# Guide\n\n## Beta\n\nSecond part.\n\n## Alpha\n\nFirst part.\n"

    assert set(hashes(one)) == set(hashes(two))


def test_identical_text_hashes_identically_wherever_it_appears():
    section = "## Licence\n\nBSD-3-Clause.\n"

    assert (
        hashes(f"# A\n\n{section}", "Site")[-1]
        == hashes(f"# A\n\n{section}", "Site")[-1]
    )
    assert hashes(section, "Site A") != hashes(section, "Site B"), (
        "the title is embedded"
    )


def test_long_prose_is_split_at_sentences_with_a_small_overlap():
    prose = " ".join(f"Sentence {i} says something useful here." for i in range(400))

    chunks = chunk_markdown(f"## Long\n\n{prose}\n")

    assert len(chunks) > 2
    assert all(count_tokens(c.text) <= MAX_TOKENS + 20 for c in chunks)
    for first, second in zip(chunks, chunks[1:], strict=False):
        last_sentence = first.text.rsplit(". ", 1)[-1]
        assert second.text.startswith(last_sentence)
    joined = " ".join(c.text for c in chunks)
    assert all(f"Sentence {i} says" in joined for i in range(400))


def test_a_long_list_is_split_between_items():
    items = "\n".join(f"- item {i} with a few words of text" for i in range(400))

    chunks = chunk_markdown(f"## List\n\n{items}\n")

    assert len(chunks) > 1
    for chunk in chunks:
        body = chunk.text.removeprefix("## List\n\n")
        assert all(line.startswith("- item") for line in body.split("\n"))


def test_a_huge_code_block_is_never_cut():
    code = "\n".join(f"x{i} = {i}" for i in range(1500))

    chunks = chunk_markdown(f"## Code\n\n```python\n{code}\n```\n")

    assert len(chunks) == 1
    assert code in chunks[0].text


def test_empty_markdown_has_no_chunks():
    assert chunk_markdown("") == []
    assert chunk_markdown("# Only a heading\n") == []


def test_clean_inline_keeps_labels_and_drops_targets():
    text = (
        'Read [docs](http://x/y_(z) "t"), ![diagram](d.png), [ref][1], <https://a.b>.'
        "\n[1]: http://x"
    )

    assert clean_inline(text) == "Read docs, diagram, ref, https://a.b."


def test_an_h1_repeating_the_title_is_not_embedded_twice():
    (chunk,) = chunk_markdown("# Install\n\n## Steps\n\nRun it.\n", title="Install")

    assert chunk.heading == "Install › Steps"
    assert chunk.embed_text.startswith("Install › Steps\n\n")


def test_a_page_that_starts_at_h2_keeps_its_sections_siblings():
    page = (
        "## 25.1. Routine Vacuuming\n\nIntro.\n\n"
        "### 25.1.1. Vacuuming Basics\n\nBasics.\n\n"
        "### 25.1.2. Recovering Disk Space\n\nSpace.\n"
    )

    assert [c.heading for c in chunk_markdown(page)] == [
        "25.1. Routine Vacuuming",
        "25.1. Routine Vacuuming › 25.1.1. Vacuuming Basics",
        "25.1. Routine Vacuuming › 25.1.2. Recovering Disk Space",
    ]


def test_a_skipped_level_is_not_a_parent():
    page = "# Guide\n\n### Deep\n\nOne.\n\n## Middle\n\nTwo.\n\n### Under\n\nThree.\n"

    assert [c.heading for c in chunk_markdown(page)] == [
        "Guide › Deep",
        "Guide › Middle",
        "Guide › Middle › Under",
    ]


def test_admonition_titles_are_not_sections():
    page = (
        "## Vacuuming\n\nVacuum often.\n\n### Tip\n\nUse autovacuum.\n\n"
        "### Note:\n\nIt locks nothing.\n\n### Statistics\n\nAnalyze too.\n"
    )

    chunks = chunk_markdown(page)

    assert [c.heading for c in chunks] == ["Vacuuming", "Vacuuming › Statistics"]
    assert "**Tip**\n\nUse autovacuum." in chunks[0].text
    assert "**Note:**\n\nIt locks nothing." in chunks[0].text


def test_each_chunk_knows_the_anchor_of_its_section():
    page = (
        "# Guide {#guide}\n\nIntro.\n\n## Install {#install}\n\nRun it.\n\n"
        "### Details\n\nMore.\n\n#### Deeper {#deeper}\n\nStill details.\n"
    )

    chunks = chunk_markdown(page, title="Guide")

    assert [(c.heading, c.anchor) for c in chunks] == [
        ("Guide", "guide"),
        ("Guide › Install", "install"),
        ("Guide › Install › Details", "install"),
    ]
    assert "{#" not in "".join(c.text + c.embed_text for c in chunks)
    assert chunks[1].text.startswith("## Install\n")


def test_anchors_change_no_embedded_text():
    plain = "# Guide\n\n## Install\n\nRun it.\n"
    marked = "# Guide {#g}\n\n## Install {#install}\n\nRun it.\n"

    assert hashes(plain) == hashes(marked)


def test_a_title_that_adds_the_site_name_is_not_repeated_by_the_h1():
    (chunk,) = chunk_markdown(
        "# os.path — Pathnames\n\nJoin paths.\n",
        title="os.path — Pathnames — Python 3.11 documentation",
    )

    assert chunk.embed_text.startswith(
        "os.path — Pathnames — Python 3.11 documentation\n\n"
    )
