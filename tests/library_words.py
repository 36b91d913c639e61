"""What a library itself says about a value, for tests that check the product relays it.

A test asserts the product's own words (the path it names, the kind it records) and takes the
library's words from the library, never from a copy: validators word their messages per release
(redis-py 8.2 reworded a timeout, and every fresh clone's run failed on the copy).
"""

from __future__ import annotations

from typing import Any

import jsonschema
from pydantic import TypeAdapter, ValidationError


def jsonschema_says(schema: dict[str, Any], instance: Any) -> str:
    """jsonschema's message for the first error of `instance` against `schema`."""
    validator = jsonschema.validators.validator_for(schema)(schema)
    return next(iter(validator.iter_errors(instance))).message


def pydantic_says(annotation: Any, value: Any) -> str:
    """pydantic's message for the first error of `value` against `annotation`."""
    try:
        TypeAdapter(annotation).validate_python(value)
    except ValidationError as error:
        return str(error.errors()[0]["msg"])
    raise AssertionError(f"{value!r} is valid for {annotation!r}")
