from __future__ import annotations

import random

import pytest

from kbsite.text import clean_inline, count_tokens
from retrieval.chunking import ChunkDraft, chunk_markdown
from retrieval.packing import MAX_TOKENS, table_compact

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


def test_tables_and_code_survive_intact_tables_without_the_spaces_aligning_them():
    chunks = chunk_markdown(PAGE)

    assert "| Setting | Default |\n| --- | --- |\n| DEBUG | false |" in chunks[2].text


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
    assert all(count_tokens(c.text) <= MAX_TOKENS for c in chunks)
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


def body_of(chunk: ChunkDraft, heading: str) -> str:
    return chunk.text.removeprefix(f"{heading}\n\n")


def assert_under_the_cap(chunks: list[ChunkDraft]) -> None:
    """The shown text and the embedded one (title and heading path included) are
    within the cap, counted as everything else counts them."""
    assert chunks
    assert max(count_tokens(c.text) for c in chunks) <= MAX_TOKENS
    assert all(c.token_count == count_tokens(c.embed_text) for c in chunks)
    assert max(c.token_count for c in chunks) <= MAX_TOKENS


def test_a_huge_paragraph_with_no_sentence_end_is_cut_at_words_under_the_cap():
    words = [f"word{i % 997}" for i in range(60_000)]
    markdown = f"## Long\n\n{' '.join(words)}\n"

    chunks = chunk_markdown(markdown, title="Doc")

    assert_under_the_cap(chunks)
    assert len(chunks) > 100
    cut = " ".join(body_of(c, "## Long") for c in chunks).split()
    assert cut == words, "every word once, in order, none cut in two"
    assert hashes(markdown, "Doc") == [c.embed_hash for c in chunks], "the same cut"


def test_a_huge_code_block_is_cut_at_lines_into_fenced_blocks():
    lines = [f"    x{i} = compute({i})  # step {i}" for i in range(8000)]
    markdown = "## Code\n\n```python title=app.py\n" + "\n".join(lines) + "\n```\n"

    chunks = chunk_markdown(markdown)

    assert_under_the_cap(chunks)
    assert len(chunks) > 10
    assert chunks[0].text.startswith("## Code\n\n```python title=app.py\n")
    kept = []
    for chunk in chunks:
        fence, *code, close = body_of(chunk, "## Code").split("\n")
        assert (fence, close) == ("```python title=app.py", "```")
        kept += code
    assert kept == lines


def test_a_huge_table_is_cut_between_rows_each_piece_under_the_header():
    header = "| Setting | Default |\n| --- | --- |"
    rows = [f"| setting_{i} | value {i * 7} |" for i in range(10_000)]
    aligned = "| Setting | Default |\n| ------- | ------- |"

    chunks = chunk_markdown(f"## Settings\n\n{aligned}\n" + "\n".join(rows) + "\n")

    assert_under_the_cap(chunks)
    kept = []
    for chunk in chunks:
        body = body_of(chunk, "## Settings")
        assert body.startswith(f"{header}\n")
        kept += body.removeprefix(f"{header}\n").split("\n")
    assert kept == rows


@pytest.mark.slow  # a megabyte line
def test_a_single_one_megabyte_line_of_code_is_cut_at_characters_still_fenced():
    line = "é" * 200_000 + "x" * 300_000 + "ab" * 150_000

    chunks = chunk_markdown(f"## Blob\n\n```\n{line}\n```\n")

    assert_under_the_cap(chunks)
    bodies = [body_of(c, "## Blob") for c in chunks]
    assert all(b.startswith("```\n") and b.endswith("\n```") for b in bodies)
    assert "".join(b[4:-4] for b in bodies) == line, "no character lost or broken"


def test_a_block_that_fits_alone_but_not_after_its_heading_is_cut_to_fit():
    heading = "## Workers and the queues they read"
    sentence = "Each worker reads one queue and writes its results back. "
    paragraph = (sentence * 63).strip()
    assert count_tokens(paragraph) <= MAX_TOKENS
    assert count_tokens(f"{heading}\n\n{paragraph}") > MAX_TOKENS

    chunks = chunk_markdown(f"{heading}\n\n{paragraph}\n")

    assert_under_the_cap(chunks)
    assert chunks[0].text.startswith(f"{heading}\n\nEach worker")
    assert len(chunks) == 2


def test_a_monstrous_heading_is_cut_and_bounded_in_the_embedded_text():
    heading = " ".join(f"h{i}" for i in range(5000))

    chunks = chunk_markdown(f"## {heading}\n\nShort text.\n", title="Doc")

    assert_under_the_cap(chunks)
    assert "Short text." in chunks[-1].text


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


TITLE = "The Harbor job scheduler: " + " ".join(f"topic{i}" for i in range(60))
SENTENCE = "Each worker reads [one queue](https://example.com/q) and writes back. "
LONG_BLOCKS = {
    "prose": (SENTENCE * 150).strip(),
    "a paragraph that fits alone": (SENTENCE * 40).strip(),
    "a list": "\n".join(f"- item {i}: {SENTENCE}" for i in range(120)),
    "code over the cap": "```python\n"
    + "\n".join(f"x{i} = run({i})  # step {i}" for i in range(900))
    + "\n```",
    "a table over the cap": "| key | value |\n| --- | --- |\n"
    + "\n".join(f"| key_{i} | {SENTENCE} |" for i in range(200)),
    "a word longer than a chunk": "x" * 20_000,
}


@pytest.mark.parametrize("block", LONG_BLOCKS.values(), ids=LONG_BLOCKS)
@pytest.mark.parametrize(
    "heading",
    ["## Workers", "## " + " ".join(f"part{i}" for i in range(120)), ""],
    ids=["a heading", "a long heading", "no heading"],
)
def test_no_chunk_is_over_the_cap_with_its_title_and_heading_path(heading, block):
    chunks = chunk_markdown(f"# Scheduler\n\n{heading}\n\n{block}\n", title=TITLE)

    assert_under_the_cap(chunks)


def test_a_text_that_its_cleaning_makes_longer_is_cut_to_fit():
    # The embedded text drops the outer spaces: " naïve" is 2 tokens, "naïve" 3.
    room = MAX_TOKENS - count_tokens("Doc\n\n")
    text = " naïve" + " x" * (room - count_tokens(" naïve"))
    assert count_tokens(text) == room
    assert count_tokens(f"Doc\n\n{text.strip()}") == MAX_TOKENS + 1

    chunks = chunk_markdown(f"{text}\n", title="Doc")

    assert_under_the_cap(chunks)
    assert " ".join(c.text.strip() for c in chunks).split() == text.split()


def random_markdown(rng: random.Random) -> str:
    """A page of sections and blocks of every kind, some far over the cap, with
    links, non-Latin text, leading spaces and long headings."""
    words = (
        "the queue worker reads jobs and writes results to postgres naïve café "
        "東京 данные x86_64 foo.bar() `code` **bold** 3.14 don't e.g. [link](/a/b) "
        "https://example.com/a?b=c ¶"
    ).split()

    def sentence() -> str:
        text = " ".join(rng.choice(words) for _ in range(rng.randint(2, 30)))
        return text + rng.choice([".", "!", "?", ". ", ""])

    def block() -> str:
        kind, size = rng.randrange(5), rng.choice([1, 5, 60, 300])
        rows = [sentence() for _ in range(rng.randint(1, size))]
        if kind == 0:
            return rng.choice(["", " ", "  "]) + " ".join(rows)
        if kind == 1:
            return "\n".join(f"- {row}" for row in rows)
        if kind == 2:
            info = rng.choice(["", "python", "sh title=" + "y" * rng.randrange(400)])
            return f"```{info}\n" + "\n".join(f"    {row}" for row in rows) + "\n```"
        if kind == 3:
            return "| a | b |\n| --- | --- |\n" + "\n".join(
                f"| {row} | {sentence()} |" for row in rows
            )
        return "#### " + rows[0]

    parts = []
    for _ in range(rng.randint(1, 8)):
        if rng.random() < 0.7:
            heading = " ".join(rng.choice(words) for _ in range(rng.choice([2, 40])))
            parts.append("#" * rng.randint(1, 3) + " " + heading)
        parts += [block() for _ in range(rng.randint(1, 4))]
    return "\n\n".join(parts) + "\n"


@pytest.mark.slow  # forty random pages
def test_no_chunk_of_many_random_pages_is_over_the_cap():
    rng = random.Random(20)
    for _ in range(40):
        title = " ".join(rng.choice(["Guide", "東京", "x86_64"]) for _ in range(50))
        markdown = random_markdown(rng)

        chunks = chunk_markdown(markdown, title=title[: rng.choice([0, 30, 400])])

        if chunks:
            assert_under_the_cap(chunks)


def long_table(edited: int | None = None, rows: int = 600) -> str:
    lines = "\n".join(
        f"| `KEYWORD_{n:03d}` | reserved{' (function or type)' if n % 3 else ''}"
        f"{' Added since.' if n == edited else ''} | {'non-' * (n % 2)}reserved |"
        for n in range(rows)
    )
    head = "| Key word | PostgreSQL | SQL |\n| --- | --- | --- |"
    return f"## Key words\n\n{head}\n{lines}\n"


def long_code(edited: int | None = None, lines: int = 900) -> str:
    body = "\n".join(
        f"    total_{n} = compute(step={n}, mode='fast')"
        f"{'  # changed' if n == edited else ''}"
        for n in range(lines)
    )
    return f"## Listing\n\n```python\ndef run():\n{body}\n```\n"


@pytest.mark.parametrize("page", [long_table, long_code])
def test_an_edit_in_a_long_table_or_code_block_changes_only_the_chunks_near_it(page):
    before = set(hashes(page()))
    changed = {
        edited: len(set(hashes(page(edited=edited))) - before)
        for edited in (0, 7, 150, 333, 598)
    }

    assert len(before) >= 10
    assert all(1 <= count <= 2 for count in changed.values()), changed


@pytest.mark.parametrize(
    ("table", "compact"),
    [
        ("| a   | bb |\n| --- | -- |", "| a | bb |\n| --- | --- |"),
        ("| ccc | d  |", "| ccc | d |"),
        ("|:--- | ---:| :-: |", "| :--- | ---: | :---: |"),
        ("| `a \\| b` |  x |", "| `a \\| b` | x |"),
        ("|  |  empty |", "|  | empty |"),
        ("a | b\n--- | ---", "a | b\n--- | ---"),
    ],
)  # fmt: skip
def test_a_tables_cells_lose_the_spaces_that_align_them(table, compact):
    assert table_compact(table) == compact
