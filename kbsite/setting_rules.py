"""Rules that tie settings together, enforced as the settings module reads them.

A combination that cannot work stops start-up with ``ImproperlyConfigured`` naming
the values. Not system checks: the web server and the job cluster start without
running those, and would run with the bad combination.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured


def body_limits_enforce(*, crawl: int, webhook: int) -> None:
    """The built-in crawler keeps no body that ingest would refuse."""
    if crawl > webhook:
        raise ImproperlyConfigured(
            f"CRAWL_MAX_BODY_BYTES={crawl} must not exceed "
            f"WEBHOOK_MAX_BODY_BYTES={webhook}: ingest reads every "
            "delivery under that limit"
        )


def threads_per_worker(*, cores: int, workers: int) -> int:
    """The machine's cores shared among the job cluster's workers, at least one
    each: a model computing on a thread per core in every worker runs ``workers``
    times as many threads as there are cores, and each waits on the others."""
    return max(1, cores // workers)


def openai_key_enforce(
    *, api_key: str, embedding_backend: str, chat_model: str
) -> None:
    """What calls OpenAI's API needs its key."""
    if embedding_backend == "openai" and not api_key:
        raise ImproperlyConfigured("EMBEDDING_BACKEND='openai' needs OPENAI_API_KEY")
    if chat_model and not api_key:
        raise ImproperlyConfigured(f"CHAT_MODEL={chat_model!r} needs OPENAI_API_KEY")


def queue_retry_enforce(*, timeout: int, retry: int) -> None:
    """A job is handed to another worker only once its own worker has given up."""
    if retry <= timeout:
        raise ImproperlyConfigured(
            f"Q_RETRY={retry} must be greater than Q_TIMEOUT={timeout}: a job still "
            "running would be handed to a second worker"
        )


def email_security_enforce(*, use_tls: bool, use_ssl: bool) -> None:
    """SMTP is either STARTTLS or TLS from the start, not both (Django refuses it
    only when the first mail is sent)."""
    if use_tls and use_ssl:
        raise ImproperlyConfigured(
            "EMAIL_USE_TLS and EMAIL_USE_SSL are both true: choose one (SSL for "
            "port 465, TLS for STARTTLS on 587)"
        )
