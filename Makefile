# Two commands a newcomer needs: `make run` (the product, with demo data) and `make test`.
# Both use DATABASE_URL / REDIS_URL when set, and embedded PostgreSQL and Redis servers otherwise.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
DEV := AGENTOPS_DEV=1

.PHONY: run test test-fast install translations messages lock lint deploy-check bench peers-venv bench-peers oidc-provider

# Every install comes from uv.lock: the versions (and their hashes) CI passed with, so a fresh
# machine gets what CI tested, whatever PyPI released since. uv is bootstrapped at its locked
# version with the virtualenv's pip, then `uv sync --locked` installs exactly the lock (this
# checkout editable) and refuses a lock that no longer matches pyproject.toml. The wheel keeps
# pyproject.toml's ranges for users. `make lock` moves every package to its newest allowed version
# (docs/architecture.md, "Dependencies").
UV := $(VENV)/bin/uv
UV_ENV := UV_PYTHON_DOWNLOADS=never UV_NO_PROGRESS=1
UV_LOCKED_VERSION = $(shell sed -n '/^name = "uv"$$/{n;s/^version = "\(.*\)"/\1/p;}' uv.lock)

$(VENV)/.installed: pyproject.toml uv.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	test -x $(UV) || $(PY) -m pip install --quiet "uv==$(UV_LOCKED_VERSION)"
	$(UV_ENV) $(UV) sync --locked --extra dev --python $(PY) --quiet
	touch $@

install: $(VENV)/.installed translations

# The translation catalogues (agentops/locale/<language>/LC_MESSAGES/django.po) compiled into the
# .mo files Django reads, by the same code the wheel's build runs (agentops/_build).
LOCALE_DIR := agentops/locale
CATALOGS := $(wildcard $(LOCALE_DIR)/*/LC_MESSAGES/django.po)

translations: $(CATALOGS:.po=.mo)

$(LOCALE_DIR)/%.mo: $(LOCALE_DIR)/%.po $(VENV)/.installed
	$(PY) agentops/_build/agentops_build.py

# The catalogue brought up to date with the strings marked in the code and templates (GNU
# gettext's xgettext and msgmerge): new ones added untranslated, gone ones dropped. Then translate
# the new entries in the .po (tests/test_translations.py names any left untranslated).
MESSAGES_IGNORE := --ignore '.venv*' --ignore build --ignore tests --ignore 'node_modules' \
	--ignore 'agentops/_templates' --ignore 'agentops/_static' --ignore static \
	--ignore '*requirements.txt'

lock: install
	$(UV_ENV) $(UV) lock --upgrade --python $(PY)
	$(UV_ENV) $(UV) pip compile --quiet --generate-hashes --python-version 3.11 \
	--output-file agentops/dev/benchmarks/peers-requirements.txt agentops/dev/benchmarks/peers.in

run: install
	$(DEV) $(PY) manage.py runstack

# The suite on parallel pytest-xdist workers, each with a test database, a Redis database, simulated
# services and Chromium of its own (agentops/test_settings.py). Each test goes to the next free
# worker in collection order: on each worker the rolled-back tests run first, then the ones that
# empty the database, the process tiers (crash, outage, browser, install) first among those
# (tests/conftest.py). (`--dist loadgroup` would keep an `xdist_group` on one worker; on pytest 9.2
# xdist 3.8 ignores the mark, pytest-xdist #1386, and the suite sets none.) Four workers on two
# cores: a process-tier test mostly waits on its workers (and timeouts), which the other pytest
# workers fill; with three, about a fifth of the two cores stayed idle (make test 370 s with
# three, 340 s with four, back to back, 2026-12-03).
# The workers' test databases are copies of one migrated template, kept on the server between
# runs and rebuilt when the migrations change (tests/templatedb.py).
TEST_WORKERS ?= 4
# The suite starts many Python processes (workers, servers, the installed wheel's commands): each
# reuses the bytecode the first one wrote, as Python does by default, even where the environment
# asks otherwise (some CI images set PYTHONDONTWRITEBYTECODE=1, which compiles every module again
# in every process). For every target: `make run` starts its processes too.
unexport PYTHONDONTWRITEBYTECODE
PYTEST := DJANGO_ALLOW_ASYNC_UNSAFE=true $(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup

test: install peers-venv oidc-provider
	$(PYTEST) $(PYTEST_ARGS)

# Everything but the process tiers and the tests that empty the database: the rollback-isolated
# tests, for a quick check while working.
test-fast: install oidc-provider
	$(PYTEST) -m "not (truncates or browser or crash or install or outage)" $(PYTEST_ARGS)

# makemigrations --check and mypy (django-stubs) load the settings but need no server: without
# DATABASE_URL / REDIS_URL any URL will do (and no embedded server is started for them).
# makemigrations only warns when it cannot read the applied migrations from that URL.
LINT_ENV := $(DEV) DATABASE_URL=$${DATABASE_URL:-postgres://lint@127.0.0.1/lint} \
	REDIS_URL=$${REDIS_URL:-redis://127.0.0.1:6379/0}

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(LINT_ENV) $(PY) -W "ignore:Got an error checking a consistent migration history:RuntimeWarning" \
	manage.py makemigrations --check --dry-run
	$(LINT_ENV) $(VENV)/bin/mypy

# The production settings' own check, with the environment docs/operations.md documents (it needs
# no server: like lint, it names one without starting the embedded servers).
deploy-check: install
	env -u AGENTOPS_DEV DATABASE_URL=$${DATABASE_URL:-postgres://lint@127.0.0.1/lint} \
	REDIS_URL=$${REDIS_URL:-redis://127.0.0.1:6379/0} DJANGO_SECRET_KEY=$$($(PY) -c "import secrets; print(secrets.token_urlsafe(50))") \
	DJANGO_ALLOWED_HOSTS=agentops.example.com DJANGO_CSRF_TRUSTED_ORIGINS=https://agentops.example.com \
	DJANGO_SECURE_PROXY_SSL_HEADER=HTTP_X_FORWARDED_PROTO,https DJANGO_SECURE_HSTS_PRELOAD=true \
	$(PY) manage.py check --deploy --fail-level WARNING

messages: install
	cd $(CURDIR) && $(LINT_ENV) $(PY) manage.py makemessages --locale zh_Hans --no-obsolete \
	--add-location file $(MESSAGES_IGNORE)
	$(PY) agentops/_build/agentops_build.py

bench: install
	$(DEV) $(PY) manage.py bench checkpoint --steps 20 --payload-kb 2

# The peers `bench checkpoint --peers` runs the same steps through (LangGraph, DBOS), in a
# virtualenv of their own: agentops/dev/benchmarks/peers.py imports nothing of this project.
PEERS_VENV := .venv-peers

$(PEERS_VENV)/.installed: agentops/dev/benchmarks/peers-requirements.txt $(VENV)/.installed
	test -x $(PEERS_VENV)/bin/python || $(PYTHON) -m venv $(PEERS_VENV)
	$(UV_ENV) $(UV) pip sync --quiet --require-hashes --python $(PEERS_VENV)/bin/python \
	agentops/dev/benchmarks/peers-requirements.txt
	touch $@

peers-venv: $(PEERS_VENV)/.installed

bench-peers: install peers-venv
	$(DEV) $(PY) manage.py bench checkpoint --steps 20 --payload-kb 2 --repeat 5 --peers

# The OpenID Provider the single sign-on tests sign in through (tests/oidc: panva's oidc-provider,
# run with Node.js 20.18 or later), installed exactly from its lock; tests/oidc_provider.py starts
# one per pytest worker.
OIDC_NODE_MODULES := tests/oidc/node_modules

$(OIDC_NODE_MODULES)/.installed: tests/oidc/package.json tests/oidc/package-lock.json
	cd tests/oidc && npm ci --no-audit --no-fund --silent
	touch $@

oidc-provider: $(OIDC_NODE_MODULES)/.installed
