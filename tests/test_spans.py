"""The part of a passage an answer quotes: a sentence with what it brings along."""

from __future__ import annotations

from retrieval.answer import Passage, answer_compose
from retrieval.spans import best_span, excerpt

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
