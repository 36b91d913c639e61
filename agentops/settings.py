"""Settings for the agentops project, read from the environment.

With no DATABASE_URL / REDIS_URL the project runs on SQLite (WAL) and an embedded Redis started by
`manage.py runstack`; with them set it uses those servers. Nothing here is production-only.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlparse

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("AGENTOPS_DATA_DIR", BASE_DIR / ".data"))


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def database_from_url(url: str | None) -> dict:
    """Translate DATABASE_URL (postgres://user:pass@host:port/name or sqlite:///path) to Django."""
    if not url:
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        return sqlite_database(DATA_DIR / "agentops.sqlite3")
    parsed = urlparse(url)
    if parsed.scheme == "sqlite":
        return sqlite_database(Path(unquote(parsed.path)))
    if parsed.scheme not in {"postgres", "postgresql"}:
        raise ValueError(f"DATABASE_URL: unsupported scheme {parsed.scheme!r}")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parsed.path.lstrip("/")) or "agentops",
        "USER": unquote(parsed.username or "postgres"),
        "PASSWORD": unquote(parsed.password or ""),
        "HOST": parsed.hostname or "127.0.0.1",
        "PORT": str(parsed.port or 5432),
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,
        "TEST": {"NAME": os.environ.get("DATABASE_TEST_NAME") or None},
    }


def sqlite_database(path: Path) -> dict:
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(path),
        "OPTIONS": {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
        },
    }


SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "dev-insecure-change-me")
DEBUG = env_bool("DJANGO_DEBUG", True)
ALLOWED_HOSTS = [h for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "*").split(",") if h]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "django_rq",
    "agentops.apps.AgentopsConfig",
    "agentops.sim.apps.SimConfig",
    "reviews.apps.ReviewsConfig",
    "policies.apps.PoliciesConfig",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "agentops.urls"
WSGI_APPLICATION = "agentops.wsgi.application"

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
                "reviews.context_processors.review_nav",
            ],
        },
    },
]

DATABASES = {"default": database_from_url(os.environ.get("DATABASE_URL"))}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = []
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "staticfiles"
MEDIA_ROOT = Path(os.environ.get("AGENTOPS_MEDIA_ROOT", DATA_DIR / "media"))
MEDIA_URL = "media/"

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "agentops:task_list"
LOGOUT_REDIRECT_URL = "login"

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
RQ_QUEUES = {
    "default": {
        "URL": REDIS_URL,
        "DEFAULT_TIMEOUT": 600,
        "SERIALIZER": "rq.serializers.JSONSerializer",
    },
}
RQ = {"COMMIT_MODE": "on_db_commit"}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("AGENTOPS_LOG_LEVEL", "INFO")},
    "loggers": {
        "rq.worker": {"level": os.environ.get("AGENTOPS_RQ_LOG_LEVEL", "WARNING")},
        "httpx": {"level": "WARNING"},
    },
}

# The engine's knobs. Every one is documented in docs/operations.md.
AGENTOPS = {
    # Seconds a claimed lease lasts; the holder heartbeats every third of it during a call.
    "LEASE_SECONDS": env_float("AGENTOPS_LEASE_SECONDS", 30.0),
    # A job advances its task for at most this long before it re-enqueues itself.
    "SLICE_SECONDS": env_float("AGENTOPS_SLICE_SECONDS", 5.0),
    # Full-tier snapshot every N completed steps (and whenever the task parks or ends).
    "SNAPSHOT_EVERY": env_int("AGENTOPS_SNAPSHOT_EVERY", 5),
    # Persisted values larger than this many bytes go to artifact storage.
    "ARTIFACT_THRESHOLD_BYTES": env_int("AGENTOPS_ARTIFACT_THRESHOLD_BYTES", 256 * 1024),
    # Sweeper loop interval, and how long a claimable task may sit before it is re-driven.
    "SWEEP_INTERVAL_SECONDS": env_float("AGENTOPS_SWEEP_INTERVAL_SECONDS", 2.0),
    "SWEEP_GRACE_SECONDS": env_float("AGENTOPS_SWEEP_GRACE_SECONDS", 5.0),
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
    # Model adapter: "scripted" (offline, deterministic) or "openai" (any compatible server).
    "MODEL_ADAPTER": os.environ.get("AGENTOPS_MODEL_ADAPTER", "scripted"),
    "OPENAI_BASE_URL": os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1"),
    "OPENAI_API_KEY": os.environ.get("OPENAI_API_KEY", ""),
    "OPENAI_MODEL": os.environ.get("OPENAI_MODEL", "gpt-4o-mini"),
    "MODEL_TIMEOUT_SECONDS": env_float("AGENTOPS_MODEL_TIMEOUT_SECONDS", 30.0),
    # The model's context window, and the share of it a prompt may use (quality degrades well
    # before the hard limit): older work is summarized to stay under it.
    "CONTEXT_WINDOW_TOKENS": env_int("AGENTOPS_CONTEXT_WINDOW_TOKENS", 128_000),
    "CONTEXT_BUDGET_FRACTION": env_float("AGENTOPS_CONTEXT_BUDGET_FRACTION", 0.5),
    # Confidence collapse: this many consecutive steps below the floor stop the task.
    "CONFIDENCE_FLOOR": env_float("AGENTOPS_CONFIDENCE_FLOOR", 0.5),
    "CONFIDENCE_COLLAPSE_STEPS": env_int("AGENTOPS_CONFIDENCE_COLLAPSE_STEPS", 3),
    # Whole-task wall-time budget in seconds for tasks started without one (0: none).
    "TASK_WALL_TIME_SECONDS": env_int("AGENTOPS_TASK_WALL_TIME_SECONDS", 3600),
    # A tool result larger than this (JSON bytes) fails its step with output_invalid.
    "TOOL_RESULT_MAX_BYTES": env_int("AGENTOPS_TOOL_RESULT_MAX_BYTES", 8 * 1024 * 1024),
    # Tools call the simulated third-party services at this base URL over real HTTP.
    "SIM_BASE_URL": os.environ.get("AGENTOPS_SIM_BASE_URL", "http://127.0.0.1:8000/sim"),
    "TOOL_TIMEOUT_SECONDS": env_float("AGENTOPS_TOOL_TIMEOUT_SECONDS", 10.0),
}
