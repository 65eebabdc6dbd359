"""Questions to the index: search results and cited answers for a caller, each
logged, the asker's feedback on an answer, and the sources a caller may ask about.
"""

from __future__ import annotations

import operator
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from functools import reduce

from django.core import signing
from django.db.models import Q
from django.utils import timezone

from kbsite.parallel import after, beside
from kbsite.replicas import replica_reads
from retrieval import sql
from retrieval.answer import Answer, Meaning, Passage, answer_compose
from retrieval.chunking import section_of
from retrieval.models import Chunk, QueryLog
from retrieval.search import Hit, SearchMode, SearchResult, chunks_search
from retrieval.searchable import NO_FILTERS, SearchFilters
from retrieval.spans import cut, excerpt, unmark
from sources.models import Caller, Page, Source, caller_check

EXCERPT_CHARS = 300
FEEDBACK_SALT = "retrieval.feedback"
FEEDBACK_TICKET_AGE = timedelta(days=1)


@dataclass(frozen=True)
class Citation:
    chunk: Chunk
    score: float
    # Plain text of the part of the chunk that was quoted or matched the question.
    excerpt: str = ""
    # The chunk by itself is evidence for the question (``Hit.confident``).
    confident: bool = True
    # When an editor pinned its section to answer questions like this one.
    pinned_at: datetime | None = None

    @property
    def page(self) -> Page:
        return self.chunk.page

    @property
    def section_url(self) -> str:
        return self.chunk.section_url

    @property
    def section(self) -> str:
        """The heading path without a first heading that only repeats the title."""
        return unmark(section_of(self.chunk.heading, self.page.title))

    @property
    def failed_since_verified(self) -> bool:
        """The page's latest crawl failed: what is shown may be out of date."""
        failed, verified = self.page.last_failure_at, self.page.last_verified_at
        return failed is not None and (verified is None or failed > verified)


@dataclass(frozen=True)
class Quoted:
    """What an answer was made of: the text hashes of the chunks of its cited
    passages (a passage may hold the next chunk of its section too), and their
    pages, in order."""

    hashes: tuple[str, ...] = ()
    pages: tuple[int, ...] = ()


@dataclass(frozen=True)
class Confidence:
    """How sure the search behind an answer was, as its log keeps it: the best
    similarity, the floor in force, the largest share of the question's weight
    one passage held (``retrieval.evidence.Evidence``), and the first page's lead
    over the next (``retrieval.search.page_lead``). What tells a doubtful answer
    (``retrieval.asked``)."""

    similarity: float | None = None
    floor: float | None = None
    held: float | None = None
    lead: float | None = None

    @classmethod
    def of(cls, result: SearchResult) -> Confidence:
        evidence = result.evidence
        return cls(
            similarity=round(evidence.similarity, 4),
            floor=evidence.floor,
            held=evidence.held,
            lead=result.lead,
        )


@dataclass(frozen=True)
class QueryResult:
    answer: str  # Markdown
    abstained: bool
    citations: list[Citation]
    chunk_ids: list[int]
    log_id: int | None = None  # the question's QueryLog row, for feedback
    quoted: Quoted = Quoted()
    scores: list[float] = field(default_factory=list)
    confidence: Confidence = Confidence()


def search_run(
    *,
    query: str,
    user: Caller,
    k: int,
    filters: SearchFilters = NO_FILTERS,
    mode: SearchMode = SearchMode.HYBRID,
    log: bool = True,
) -> list[Citation]:
    """Search results: the best chunk of each of ``k`` pages, best first, logged.
    A search lists what it ranked even when none of it is evidence enough to
    answer from: each citation says whether it is (``confident``). The index is
    read from a replica when there are any (``kbsite.replicas``)."""
    started = time.perf_counter()
    with replica_reads():
        result = chunks_search(
            query=query, user=user, k=k, filters=filters, mode=mode, per_page=1
        )
    if log:  # written after the answer has gone
        after(_log, QueryLog.Kind.SEARCH, query, user, result, _since(started))
    return [
        replace(c, excerpt=excerpt(query, c.chunk.text, limit=EXCERPT_CHARS))
        for c in citations_of(result.hits)
    ]


def question_answer(
    *,
    question: str,
    user: Caller,
    k: int,
    filters: SearchFilters = NO_FILTERS,
    log: bool = True,
    replica: bool = True,
) -> QueryResult:
    """An answer grounded in retrieved passages, citing the pages it used.

    The index is read from a replica when there are any (``kbsite.replicas``),
    whichever view or job asks; ``replica=False`` reads the primary, for a
    caller that must see what was just written (a recheck after a change)."""
    started = time.perf_counter()
    with replica_reads() if replica else nullcontext():
        result = chunks_search(query=question, user=user, k=k, filters=filters)
        if result.abstained:
            # Abstaining is the answer's decision: it quotes, cites and records
            # nothing of a ranking that holds no evidence.
            result = replace(result, hits=[], chunk_ids=[], lead=None)
        citations = citations_of(result.hits)
        following = _following_chunks([c.chunk for c in citations])
    passages = [
        Passage(
            number=number,
            title=c.page.title,
            url=c.page.url,
            heading=c.chunk.heading,
            text=_with_neighbour(c.chunk, following),
        )
        for number, c in enumerate(citations, start=1)
    ]
    evidence = result.evidence
    pinned = bool(result.hits) and result.hits[0].pin is not None
    answer = answer_compose(
        question=question,
        # An editor said the pinned section answers it: the answer is made of
        # that section alone, not of whichever passage shares more words.
        passages=passages[:1] if pinned else passages,
        pinned=pinned,
        unknown=evidence.unknown if evidence.off_subject else (),
        meaning=(
            Meaning(result.embedder, result.query_vector)
            if result.embedder is not None and result.query_vector is not None
            else None
        ),
    )
    quoted = _quoted_chunks([citations[n - 1].chunk for n in answer.cited], following)
    logged = (
        beside(
            _log,
            QueryLog.Kind.QUERY,
            question,
            user,
            result,
            _since(started),
            answer.text,
            quoted,
        )
        if log
        else None
    )
    cited = [
        replace(citations[n - 1], excerpt=_quoted(answer, n, passages, question))
        for n in answer.cited
    ]
    log_id = logged() if logged is not None else None
    return QueryResult(
        answer=answer.text,
        abstained=result.abstained,
        citations=cited,
        chunk_ids=result.chunk_ids,
        log_id=log_id,
        quoted=quoted,
        scores=[round(h.score, 6) for h in result.hits],
        confidence=Confidence.of(result),
    )


def _quoted_chunks(
    chunks: list[Chunk], following: dict[tuple[int, int], Chunk]
) -> Quoted:
    hashes: list[str] = []
    pages: list[int] = []
    for chunk in chunks:
        after = following.get((chunk.page_id, chunk.position + 1))
        hashes.append(chunk.embed_hash)
        if after is not None and after.heading == chunk.heading:
            hashes.append(after.embed_hash)
        if chunk.page_id not in pages:
            pages.append(chunk.page_id)
    return Quoted(hashes=tuple(dict.fromkeys(hashes)), pages=tuple(pages))


def _quoted(answer: Answer, number: int, passages: list[Passage], question: str):
    """The excerpt of a cited passage: what the answer quoted of it, with what
    follows; for a chat answer, the part that matches the question best."""
    span = answer.quoted.get(number)
    if span is not None:
        return cut(f"{span.plain} {span.after}", EXCERPT_CHARS)
    return excerpt(question, passages[number - 1].text, limit=EXCERPT_CHARS)


def citations_of(hits: list[Hit]) -> list[Citation]:
    """The best hit of each page, in order."""
    seen: set[int] = set()
    citations = []
    for hit in hits:
        if hit.page_id not in seen:
            seen.add(hit.page_id)
            citations.append(
                Citation(
                    chunk=hit.chunk,
                    score=hit.score,
                    confident=hit.confident,
                    pinned_at=hit.pin.pinned_at if hit.pin else None,
                )
            )
    return citations


def _following_chunks(chunks: list[Chunk]) -> dict[tuple[int, int], Chunk]:
    """The chunk after each of these on its page, in one query, by (page, position)."""
    if not chunks:
        return {}
    wanted = reduce(
        operator.or_,
        (Q(page_id=c.page_id, position=c.position + 1) for c in chunks),
    )
    rows = Chunk.objects.filter(wanted).only(
        "page_id", "position", "text", "heading", "embed_hash"
    )
    return {(row.page_id, row.position): row for row in rows}


def _with_neighbour(chunk: Chunk, following: dict[tuple[int, int], Chunk]) -> str:
    """The chunk and, when the section goes on, the next chunk of that section, so
    that a procedure cut in two reaches the answer whole."""
    after = following.get((chunk.page_id, chunk.position + 1))
    if after is not None and after.heading == chunk.heading:
        return f"{chunk.text}\n\n{after.text}"
    return chunk.text


def _since(started: float) -> int:
    """Milliseconds since ``started``: a question's latency as its log records it
    (measured here, not when a pool thread gets to the row)."""
    return round((time.perf_counter() - started) * 1000)


def _log(
    kind: str,
    text: str,
    user: Caller,
    result: SearchResult,
    latency_ms: int,
    answer: str = "",
    cited: Quoted | None = None,
    recheck_of: int | None = None,
) -> int:
    """The question's log row. Its commit does not wait for the WAL to reach the
    disk: a crash of the server may lose the last fraction of a second of the log,
    and no asker waits for an fsync.

    Written as SQL: the ORM's compiling of the insert took a millisecond of the
    interpreter's time, which the thread answering the request then waited for.
    """
    return sql.query_log_insert(
        kind=kind,
        text=text[:5000],
        answer=answer,
        user=user.pk if user.is_authenticated else None,
        chunk_ids=result.chunk_ids,
        scores=[round(h.score, 6) for h in result.hits],
        abstained=result.abstained,
        latency_ms=latency_ms,
        created_at=timezone.now(),
        cited_hashes=list(cited.hashes) if cited else [],
        cited_pages=list(cited.pages) if cited else [],
        recheck_of=recheck_of,
        **asdict(Confidence.of(result)),
    )


def query_feedback_record(*, log_id: int, user: Caller, helpful: bool) -> bool:
    """Store the asker's thumbs up or down on their own question; False if the
    question is not theirs (or not a question). An anonymous asker's question is
    one without an asker, named by the ticket its answer came with
    (``feedback_ticket_log``)."""
    asker = Q(user_id=user.pk) if caller_check(user).is_authenticated else Q(user=None)
    log = QueryLog.objects.filter(asker, pk=log_id, kind=QueryLog.Kind.QUERY).first()
    if log is None:
        return False
    log.record_feedback(helpful=helpful, at=timezone.now())
    log.save(update_fields=["feedback", "feedback_at"])
    return True


def feedback_ticket(log_id: int) -> str:
    """What an anonymous asker's answer carries for its feedback: the question's
    log id, signed. Logs of anonymous readers keep nobody's identity, so this is
    how the one who was answered (and nobody guessing ids) rates the answer."""
    return signing.dumps(log_id, salt=FEEDBACK_SALT)


def feedback_ticket_log(ticket: str) -> int | None:
    """The log id of a ticket that this site signed within FEEDBACK_TICKET_AGE;
    None for any other."""
    try:
        log_id = signing.loads(ticket, salt=FEEDBACK_SALT, max_age=FEEDBACK_TICKET_AGE)
    except signing.BadSignature:  # also expired
        return None
    return log_id if isinstance(log_id, int) else None


def sources_for(user: Caller) -> list[Source]:
    """The sources this user may search, by name (for the Ask page's filter)."""
    return list(Source.objects.searchable_by(user).distinct().order_by("name"))
