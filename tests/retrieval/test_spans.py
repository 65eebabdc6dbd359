"""The part of a passage an answer quotes: a sentence with what it brings along."""

from __future__ import annotations

import pytest

from retrieval.answer import Passage, answer_compose
from retrieval.spans import best_span, excerpt
from tests.conftest import local_model_require

PARTIAL = """### 11.8. Partial Indexes

A partial index is an index built over a subset of a table.

To create a partial index that suits our example, use a command such as this:

```sql
CREATE INDEX access_log_client_ip_ix ON access_log (client_ip)
WHERE NOT (client_ip > inet '192.168.100.0' AND
           client_ip < inet '192.168.100.255');
```

A typical query that can use this index would be:

```sql
SELECT * FROM access_log WHERE url = '/index.html';
```
"""

SETTINGS = """### 20.3.1. Connection Settings

###### `listen_addresses` (`string`)

Specifies the TCP/IP address(es) on which the server is to listen for connections.

###### `max_connections` (`integer`)

Determines the maximum number of concurrent connections to the database server.
The default is typically 100 connections.

###### `port` (`integer`)

The TCP port the server listens on; 5432 by default.
"""


def test_a_sentence_that_introduces_a_code_block_comes_with_it():
    span = best_span("How do I create a partial index?", PARTIAL)

    assert span.lead.startswith("To create a partial index")
    assert span.attached.startswith("```sql\nCREATE INDEX access_log_client_ip_ix")
    assert "client_ip < inet '192.168.100.255');\n```" in span.attached


def test_a_definition_comes_with_its_term_and_the_term_with_its_definition():
    by_name = best_span("max_connections", SETTINGS)
    by_meaning = best_span("Which TCP port does the server listen on?", SETTINGS)

    assert by_name.lead == "**`max_connections` (`integer`)**"
    assert by_name.attached.startswith("Determines the maximum number")
    assert by_meaning.lead == "**`port` (`integer`)**"


def test_the_excerpt_is_the_part_that_matched_not_the_chunk_start():
    text = excerpt("max_connections", SETTINGS, limit=120)

    assert text.startswith("max_connections (integer) Determines the maximum")
    assert "listen_addresses" not in text
    assert text.endswith(" …") and len(text) <= 122


def test_an_extractive_answer_carries_its_code_block_and_marks_its_source():
    passage = Passage(number=1, title="Partial Indexes", url="https://x/p.html",
                      heading="11.8. Partial Indexes", text=PARTIAL)  # fmt: skip

    answer = answer_compose(question="How do I create a partial index?",
                            passages=[passage])  # fmt: skip

    assert answer.text.startswith(
        "To create a partial index that suits our example, use a command such as "
        "this: [1]\n\n```sql\nCREATE INDEX"
    )
    assert "           client_ip < inet" in answer.text, "code keeps its spacing"
    assert answer.cited == [1]


def test_markers_inside_code_are_code():
    code = "Index an array:\n\n```python\nitems[1] = values[2]\n```\n"
    passage = Passage(number=1, title="t", url="u", heading="", text=code)

    answer = answer_compose(question="index an array", passages=[passage])

    assert "items[1] = values[2]" in answer.text
    assert answer.cited == [1]


CODE_BLOCK = """### Showing code

The `code-block` directive highlights a block of code in a language. With the
`:emphasize-lines:` option, given line numbers are highlighted. Example with options:

```rst
.. code-block:: python
   :emphasize-lines: 3,5

   def some_function():
       interesting = False
```

Other options follow.
"""

INTL = """## Translating with sphinx-intl

This section describes an easy way to translate with sphinx-intl.

1. Install sphinx-intl: `pip install sphinx-intl`.
2. Add configurations to `conf.py`: `locale_dirs = ['locale/']`.
3. Extract translatable messages: `make gettext`.

## Using Transifex

Transifex is a service.
"""

LONG_LEAD = (
    "### Options\n\nThe `:emphasize-lines:` option highlights lines. "
    + "It takes a list of numbers and ranges of them, in any order. " * 8
    + "Example:\n\n```rst\n:emphasize-lines: 1-2\n```\n"
)


def test_a_paragraph_that_ends_on_a_lead_in_brings_its_example():
    span = best_span("Which code-block option highlights lines?", CODE_BLOCK)

    assert "With the `:emphasize-lines:` option, given line numbers" in span.lead
    assert span.lead.endswith("Example with options:")
    assert span.attached.startswith("```rst\n.. code-block:: python")
    assert ":emphasize-lines: 3,5" in span.attached


def test_a_long_way_to_the_lead_in_is_skipped_with_an_ellipsis():
    span = best_span("emphasize-lines option", LONG_LEAD)

    assert span.lead == "The `:emphasize-lines:` option highlights lines. … Example:"
    assert span.attached == "```rst\n:emphasize-lines: 1-2\n```"


def test_a_section_that_names_its_topic_is_answered_from_its_body():
    span = best_span("How do I translate with sphinx-intl?", INTL)

    assert span.lead.startswith("This section describes an easy way")
    assert "pip install sphinx-intl" in span.attached
    assert "make gettext" in span.attached
    assert "Transifex" not in span.attached


def test_a_first_sentence_that_says_something_is_quoted_alone():
    # "A partial index is …" answers "what is": it introduces nothing.
    span = best_span("What is a partial index?", PARTIAL)

    assert span.lead == "A partial index is an index built over a subset of a table."
    assert span.attached == ""


def test_the_extractive_answer_holds_the_example_not_only_its_lead_in():
    passage = Passage(number=1, title="Code", url="https://d.example/code/",
                      heading="Showing code", text=CODE_BLOCK)  # fmt: skip

    answer = answer_compose(
        question="Which code-block option highlights lines?", passages=[passage]
    )

    assert ":emphasize-lines: 3,5" in answer.text


TYPEHINTS = """### Configuration

###### `autodoc_typehints`

This value controls how to represent typehints. The setting takes the following
values:

- `'signature'` – Show typehints in the signature (default)
- `'description'` – Show typehints as content of the function or method
- `'none'` – Do not show typehints
"""

INSTALL_TOPIC = """## Installing

This section describes how to install Sphinx. You need Python 3.8 or later, then
run pip install sphinx in a virtual environment.

Debian and Ubuntu users may install the python3-sphinx package instead.
"""


def test_a_term_comes_with_its_description_and_the_list_the_description_leads_into():
    span = best_span("What values does autodoc_typehints take?", TYPEHINTS)

    assert span.lead == "**`autodoc_typehints`**"
    assert span.attached.startswith("This value controls how to represent typehints.")
    assert "`'description'` – Show typehints as content" in span.attached


# As the Sphinx docs have it: the topic sentence ends the section's first paragraph.
INTL_AS_PUBLISHED = """### Quick guide

sphinx-intl is a useful tool to work with Sphinx translation flow. This
section describe an easy way to translate with *sphinx-intl*.

1. Install sphinx-intl.

   ```
   $ pip install sphinx-intl
   ```

2. Extract translatable messages into pot files.

   ```
   $ make gettext
   ```
"""


def test_a_topic_sentence_ending_the_first_paragraph_brings_the_steps():
    span = best_span("How do I translate with sphinx-intl?", INTL_AS_PUBLISHED)

    assert span.lead.startswith("This section describe an easy way")
    assert "$ pip install sphinx-intl" in span.attached
    assert "$ make gettext" in span.attached


def test_a_topic_sentence_followed_by_its_own_sentences_is_quoted_with_them():
    span = best_span("How do I install Sphinx?", INSTALL_TOPIC)

    assert "pip install sphinx" in span.markdown + span.after
    assert "python3-sphinx" not in span.attached


# As sphinx-build's man page has it: options as definition terms.
SPHINX_BUILD = """### Options

###### `-b buildername`

The most important option: it selects a builder. The most common builders are
html, dirhtml and latex.

###### `-j N`

Distribute the build over N processes in parallel, to make building on
multiprocessor machines more effective.

###### `-q`

Do not output anything on standard output, only write warnings and errors to
standard error.

###### `-W`

Turn warnings into errors. This means that the build stops at the first warning
and `sphinx-build` exits with exit status 1.

###### `--keep-going`

With -W option, keep going processing when getting warnings to the end of build,
and `sphinx-build` exits with exit status 1.
"""


def test_with_meaning_the_span_closest_to_the_question_wins_not_the_most_words():
    # By words, "make" (-j N) and "warning" (-W, --keep-going) tie, and the
    # first entry wins; the meaning is -W's.
    question = "How can I make my CI job fail whenever the docs produce a warning?"
    by_words = best_span(question, SPHINX_BUILD)
    closeness = {"-W": 0.62, "--keep-going": 0.55}

    def similar(texts):
        return [
            next((v for k, v in closeness.items() if f"`{k}`" in t), 0.1) for t in texts
        ]

    by_meaning = best_span(question, SPHINX_BUILD, similar=similar)

    assert by_words.lead == "**`-j N`**"
    assert by_meaning.lead == "**`-W`**"
    assert by_meaning.attached.startswith("Turn warnings into errors.")
    assert by_meaning.similarity == 0.62


def test_with_meaning_an_identifier_the_question_names_still_wins():
    def similar(texts):
        return [0.9 if "standard output" in t else 0.2 for t in texts]

    span = best_span("Which one is quiet? Is it like max_workers?", SPHINX_BUILD,
                     similar=similar)  # fmt: skip
    option = best_span("What does -j N do?", SPHINX_BUILD, similar=similar)
    held = best_span("Where does quiet mode write autodoc_typehints warnings?",
                     TYPEHINTS + SPHINX_BUILD, similar=similar)  # fmt: skip

    assert span.lead == "**`-q`**", "no identifier held by any: meaning decides"
    assert option.lead == "**`-j N`**", "an option is an identifier"
    assert held.lead == "**`autodoc_typehints`**", "the one held beats meaning"


@pytest.mark.slow
def test_the_local_model_picks_the_option_a_question_in_a_users_words_means():
    local_model_require()
    from retrieval.answer import Meaning
    from retrieval.backends import LocalEmbedder

    embedder = LocalEmbedder("all-MiniLM-L6-v2", 384)
    question = "How can I make my CI job fail whenever the docs produce a warning?"
    passage = Passage(number=1, title="sphinx-build", url="https://d.example/man/",
                      heading="Options", text=SPHINX_BUILD)  # fmt: skip
    (vector,) = embedder.embed([question])

    answer = answer_compose(
        question=question, passages=[passage], meaning=Meaning(embedder, vector)
    )
    by_words = answer_compose(question=question, passages=[passage])

    assert answer.text.startswith("**`-W`** [1]\n\nTurn warnings into errors."), (
        answer.text
    )
    assert not by_words.text.startswith("**`-W`**"), by_words.text


def test_meaning_judges_a_budget_of_text_the_candidates_sharing_words_first():
    given: list[list[str]] = []

    def similar(texts):
        given.append(list(texts))
        return [0.5] * len(texts)

    question = "Which option turns warnings into errors?"
    best_span(question, SPHINX_BUILD, similar=similar, budget=120)
    best_span(question, SPHINX_BUILD, similar=similar, budget=0)
    whole = best_span(question, SPHINX_BUILD, similar=similar, budget=10_000)

    small, everything = given  # a budget of 0 embeds nothing
    assert sum(map(len, small)) <= 120
    assert small[0].startswith("`-W` Turn warnings into errors."), small
    assert len(everything) == 12, "5 terms and the sentences of 5 descriptions"
    assert whole.similarity == 0.5


STR_METHODS = """### String Methods

###### `str.rpartition(sep)`

Split the string at the last occurrence of sep, and return a 3-tuple.

###### `str.rsplit(sep=None, maxsplit=-1)`

Return a list of the words in the string, from the right.

###### `str.split(sep=None, maxsplit=-1)`

Return a list of the words in the string, using sep as the delimiter string.
"""


@pytest.mark.parametrize(
    ("question", "text", "names"),
    [
        ("str.split", "str.split(sep=None)", True),
        ("str.split", "see str.split.", True),
        ("str.split", "STR.SPLIT(x)", True),
        ("str.split", "str.rsplit(sep)", False),
        ("str.split", "mystr.split()", False),
        ("str.split", "str.splitlines()", False),
        ("str.split", "Split the string at the last occurrence", False),
        ("What does max_connections do?", "max_connections (integer)", True),
        ("What does max_connections do?", "superuser_reserved_connections", False),
        ("fail on warnings with -W?", "-W Turn warnings into errors", True),
        ("fail on warnings with -W?", "-w file writes warnings to file", False),
        ("fail on warnings with -W?", "gcc -Wall", False),
        ("sphinx-build --keep-going", "--keep-going With -W option", True),
        ("sphinx-build --keep-going", "--keep-going-on", False),
        ("Which role is :py:func:?", "The :py:func: role", True),
        ("How do I use a well-known option?", "well-known", False),
        ("auto_explain.log_min_duration", "auto_explain.log_min_duration (int)", True),
        ("auto_explain.log_min_duration", "The auto_explain module provides", False),
        ("_thread.start_new_thread", "_thread.start_new_thread(f, args)", True),
        ("How often does it retry, e.g. on timeout?", "Set a limit, e.g. 5", False),
        ("What changed in 3.11?", "Changed in version 3.11", False),
        ("Does it run at 10:30 and/or at noon?", "at 10:30 and/or", False),
    ],
)
def test_an_identifier_the_question_names_is_found_whole(question, text, names):
    from retrieval.spans import identifiers_in

    assert any(p.search(text) for p in identifiers_in(question)) is names


def test_with_meaning_the_entry_of_the_identifier_asked_for_wins():
    def similar(texts):
        # The small model reads "Split the string" as nearest to "str.split".
        return [0.8 if "Split the string" in t else 0.4 for t in texts]

    span = best_span("str.split", STR_METHODS, similar=similar)

    assert span.lead == "**`str.split(sep=None, maxsplit=-1)`**"


CONCURRENTLY = """### Building Indexes Concurrently

Creating an index can interfere with regular operation of a database. PostgreSQL
supports building indexes without locking out writes. This method is invoked by
specifying the `CONCURRENTLY` option of `CREATE INDEX`. When this option is used,
PostgreSQL must perform two scans of the table.
"""


@pytest.mark.parametrize(
    ("question", "lead"),
    [
        (
            "How do I build an index without blocking writes?",
            "PostgreSQL supports building indexes without locking out writes. This "
            "method is invoked by specifying the `CONCURRENTLY` option of "
            "`CREATE INDEX`.",
        ),
        (
            "Can an index be built without blocking writes?",
            "PostgreSQL supports building indexes without locking out writes.",
        ),
    ],
)
def test_how_do_i_goes_on_to_the_sentence_that_names_the_code(question, lead):
    def similar(texts):
        return [0.9 if t.startswith("PostgreSQL supports") else 0.3 for t in texts]

    span = best_span(question, CONCURRENTLY, similar=similar)

    assert span.lead == lead
    assert span.after.startswith("When this option is used" if "`" in lead else "This")


class FakeMeaning:
    """An embedder that reads meaning: "warning" words point one way, the rest
    another."""

    reads_meaning = True

    def embed(self, texts):
        return [[1.0, 0.0] if "warning" in t else [0.0, 1.0] for t in texts]


@pytest.mark.parametrize("budget", [20, 45, 1200])
def test_a_passage_the_budget_left_unjudged_is_not_quoted_beside_the_first(
    budget, settings
):
    from retrieval.answer import Meaning

    settings.ANSWER_MEANING_CHARS = budget
    passages = [
        Passage(
            number=n, title="t", url=f"https://d.example/{n}", heading="h", text=text
        )  # fmt: skip
        for n, text in enumerate(
            [
                "Use -W to turn warnings into errors.",
                "Bananas are yellow and grow on plants.",
                "Cats sleep all day in the sun.",
            ],
            start=1,
        )
    ]

    answer = answer_compose(
        question="How do I fail on warnings?",
        passages=passages,
        meaning=Meaning(FakeMeaning(), [1.0, 0.0]),
    )

    assert answer.cited == [1], answer.text


@pytest.mark.parametrize(
    ("heading", "text", "named"),
    [
        # The sentence's subject is the section's: the heading says what it is.
        ("Usage › borg key change-passphrase",
         "This command can be used to change this passphrase.",
         "**borg key change-passphrase**: This command"),
        ("Usage › borg prune", "It keeps the archives the rules name.",
         "**borg prune**: It keeps"),
        ("Options › --stats", "These numbers are printed at the end.",
         "**--stats**: These numbers"),
        # A part of a reference entry names nothing: the entry's own heading.
        ("borg key change-passphrase › Description",
         "This command can be used to change this passphrase.",
         "**borg key change-passphrase**: This command"),
        # A sentence that names its subject, or says it already: as it is.
        ("Usage › borg key change-passphrase",
         "Run borg key change-passphrase to change the passphrase.", ""),
        ("Usage › borg prune", "This is what borg prune keeps.", ""),
        ("", "This command changes the passphrase.", ""),
    ],
)  # fmt: skip
def test_a_sentence_pointing_back_at_its_section_comes_with_its_heading(
    heading, text, named
):
    passage = Passage(number=1, title="Borg", url="https://x/", heading=heading,
                      text=text)  # fmt: skip

    answer = answer_compose(question="change the passphrase", passages=[passage])

    assert answer.text.startswith(named or text)


UNFINISHED_LEAD_INS = [
    # (the lead-in, what follows it, what the quote must bring)
    ("Go back to the last committed state of a file with",
     "```\ngit checkout -- FILE\n```", "git checkout -- FILE"),
    ("To go back to the last committed state of a file, run",
     "```\ngit checkout -- FILE\n```", "git checkout -- FILE"),
    ("Go back to the last committed state of a file with one of",
     "- `git checkout -- FILE`\n- `git restore FILE`", "git restore FILE"),
    ("The last committed state of a file comes back with `git checkout` —",
     "```\ngit checkout -- FILE\n```", "git checkout -- FILE"),
    ("Go back to the last committed state of a file with these commands:",
     "| command | since |\n|---|---|\n| `git restore FILE` | 2.23 |",
     "git restore FILE"),
]  # fmt: skip


@pytest.mark.parametrize(("lead_in", "follows", "brought"), UNFINISHED_LEAD_INS)
def test_a_lead_in_cut_off_by_what_it_introduces_brings_it(lead_in, follows, brought):
    text = f"## Undo\n\nEdits are kept in the working tree.\n\n{lead_in}\n\n{follows}\n"

    span = best_span("How do I go back to the last committed state of a file?", text)

    assert span.lead.strip("*").startswith(lead_in[:20])
    assert brought in span.attached


def test_a_finished_sentence_does_not_take_the_code_after_it():
    text = (
        "## Undo\n\nThe last committed state of a file is kept in the repository.\n\n"
        "```\ngit log -- FILE\n```\n"
    )

    span = best_span("Where is the last committed state of a file kept?", text)

    assert span.lead.startswith("The last committed state")
    assert span.attached == ""
