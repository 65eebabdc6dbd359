# Everything a fresh clone needs: `make run` to use it, `make test` to check it.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint check migrate superuser bench stop-db clean

$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $(STAMP)

migrate: $(STAMP)
	$(PY) manage.py migrate --noinput

run: migrate
	$(PY) manage.py serve

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) manage.py makemigrations --check --dry-run
	$(PY) manage.py check --fail-level WARNING

test: lint
	$(VENV)/bin/pytest

superuser: $(STAMP)
	$(PY) manage.py createsuperuser

# Stop the embedded database now, even if a process still holds it.
stop-db: $(STAMP)
	$(PY) -m kbsite.pgembedded stop

clean:
	rm -rf $(VENV)
