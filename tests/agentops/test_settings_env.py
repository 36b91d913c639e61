"""Settings say what is wrong: a variable that does not parse stops the process with one line
naming it and the form expected, never a traceback."""

from __future__ import annotations

import pytest

from tests.agentops.test_deploy import manage, production_env

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("DJANGO_EMAIL_PORT", "abc", "must be a whole number of 0 or more, not 'abc'"),
        ("AGENTOPS_SNAPSHOT_EVERY", "-3", "must be a whole number of 0 or more, not '-3'"),
        ("AGENTOPS_LEASE_SECONDS", "30s", "must be a number of 0 or more (seconds: 30 or 2.5"),
        ("AGENTOPS_TOOL_TIMEOUT_SECONDS", "nan", "must be a number of 0 or more"),
        ("DJANGO_SECURE_HSTS_PRELOAD", "ture", "must be true or false"),
        ("AGENTOPS_DB_LOCK_TIMEOUT", "3 seconds", "must be a PostgreSQL duration such as 3s"),
        ("AGENTOPS_LOG_FORMAT", "xml", "must be one of kv, json, not 'xml'"),
        ("AGENTOPS_LOG_LEVEL", "loud", "must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL"),
        ("AGENTOPS_MODEL_ADAPTER", "gpt", "must be one of scripted, openai, not 'gpt'"),
        ("AGENTOPS_PUBLIC_URL", "agentops.example.com", "must be an http(s) URL"),
        ("AGENTOPS_ARTIFACT_STORAGE", "s3", "must be files or postgres, not 's3'"),
        ("REDIS_URL", "notaurl", "is not a Redis URL (redis://"),
        ("REDIS_URL", "redis://localhost:notaport/0", "is not a Redis URL (redis://"),
        ("AGENTOPS_DB_POOL_MODE", "session", "must be direct or transaction, not 'session'"),
    ],
)
def test_a_setting_that_does_not_parse_stops_with_one_line_naming_it(variable, value, expected):
    result = manage("check", env=production_env(**{variable: value}))

    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"agentops: {variable} {expected}"), lines[0]


def test_a_redis_url_that_does_not_parse_is_refused_without_its_password():
    result = manage("check", env=production_env(REDIS_URL="redis://:hunter2@cache:63x9/0"))

    assert result.returncode != 0
    assert result.stderr.startswith("agentops: REDIS_URL is not a Redis URL")
    assert "hunter2" not in result.stderr


def test_good_values_in_every_accepted_form_pass():
    result = manage(
        "check",
        env=production_env(
            DJANGO_EMAIL_PORT=" 587 ",
            AGENTOPS_LEASE_SECONDS="2.5",
            DJANGO_SECURE_HSTS_PRELOAD="Yes",
            AGENTOPS_DB_LOCK_TIMEOUT="500ms",
            AGENTOPS_LOG_FORMAT="json",
            AGENTOPS_ARTIFACT_STORAGE="postgres",
            AGENTOPS_PUBLIC_URL="https://agentops.example.com/",
        ),
    )
    assert result.returncode == 0, result.stderr
