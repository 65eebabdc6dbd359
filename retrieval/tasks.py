"""django-q2 entry points of the index."""

from __future__ import annotations

from django.conf import settings

from retrieval.asked import question_vectors_fill
from retrieval.indexing import codes_fill, embeddings_prune
from retrieval.pins import pin_vectors_fill
from retrieval.rechecks import answers_recheck
from retrieval.retention import query_log_prune
from retrieval.statistics import index_statistics_refresh


def index_statistics_refresh_task() -> str:
    """Every ten minutes: unused vectors pruned, codes given to the chunks whose
    code is not of the serving space, and the statistics refreshed if the index
    changed by a tenth."""
    pruned = embeddings_prune()
    coded = codes_fill()
    refresh = index_statistics_refresh()
    done = "fresh" if refresh is None else f"{refresh.chunks} chunks, {refresh.floors}"
    return f"{done}; {pruned} unused vectors pruned; {coded} chunks coded"


# Questions one run embeds at most: a busy day's unanswered ones in a few minutes
# of a local model's time; the next run takes the rest.
QUESTIONS_PER_RUN = 5000


def question_vectors_fill_task() -> str:
    """Every ten minutes: the questions the docs owner's page groups (unanswered,
    or marked not useful) embedded in the serving space, and pinned questions
    that have no vector in it (the model changed since they were pinned)."""
    done = question_vectors_fill(limit=QUESTIONS_PER_RUN)
    pinned = pin_vectors_fill(limit=QUESTIONS_PER_RUN)
    return f"{done} questions embedded, {pinned} pinned questions"


def answers_recheck_task() -> str:
    """Every ten minutes: stale answers asked again, within the hour's budget."""
    done = answers_recheck()
    return (
        f"{done.asked} asked again: {done.held} still hold, {done.changed} changed; "
        f"{done.left} stale left"
    )


def query_log_prune_task() -> str:
    """Every hour: query log rows older than QUERY_LOG_DAYS deleted, but those a
    reader rated and the answers of a question whose history stays."""
    pruned = query_log_prune()
    return f"{pruned} query log rows older than {settings.QUERY_LOG_DAYS} days pruned"
