"""The settings' environment variables read and checked: a value that does not parse stops the
process at startup with one line naming the variable (`refuse`), never a traceback and never a
default silently taken instead. Pure: the settings import it before Django is set up."""

from __future__ import annotations

import math
import os
import re
import sys
from typing import NoReturn

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off", ""})


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    word = value.strip().lower()
    if word not in TRUE_WORDS | FALSE_WORDS:
        refuse(name, f"must be true or false (1/0, yes/no, on/off), not {value!r}")
    return word in TRUE_WORDS


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        refuse(name, f"must be a whole number of 0 or more, not {value!r}")
    return number


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or number < 0:
        refuse(name, f"must be a number of 0 or more (seconds: 30 or 2.5, no unit), not {value!r}")
    return number


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = os.environ.get(name, "").strip() or default
    if value not in choices:
        refuse(name, f"must be one of {', '.join(choices)}, not {value!r}")
    return value


def env_url(name: str, default: str) -> str:
    value = os.environ.get(name, "").strip() or default
    if not re.fullmatch(r"https?://[^\s/?#]+(/\S*)?", value):
        refuse(name, f"must be an http(s) URL such as https://agentops.example.com, not {value!r}")
    return value.rstrip("/")


# PostgreSQL's own duration form (`3s`, `500ms`, `1min`): passed to the server as it is.
POSTGRES_DURATION = re.compile(r"\d+(us|ms|s|min|h|d)?")


def env_duration(name: str, default: str) -> str:
    value = os.environ.get(name, "").strip() or default
    if not POSTGRES_DURATION.fullmatch(value):
        refuse(name, f"must be a PostgreSQL duration such as 3s, 500ms or 2min, not {value!r}")
    return value


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def refuse(variable: str, why: str) -> NoReturn:
    """Stop at startup with one line naming the variable (no traceback)."""
    sys.exit(
        f"agentops: {variable} {why}; see docs/operations.md (AGENTOPS_DEV=1 selects "
        "development mode)."
    )
