# Two commands a newcomer needs: `make run` (the product, with demo data) and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/agentops
TEST_REDIS_URL ?= redis://127.0.0.1:6379/15

.PHONY: run test install lint bench

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

install: $(VENV)/.installed

run: install
	$(PY) manage.py runstack

test: install
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} REDIS_URL=$${REDIS_URL:-$(TEST_REDIS_URL)} \
	DJANGO_ALLOW_ASYNC_UNSAFE=true $(PY) -m pytest $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) manage.py makemigrations --check --dry-run

bench: install
	$(PY) manage.py bench checkpoint --steps 20 --payload-kb 2
