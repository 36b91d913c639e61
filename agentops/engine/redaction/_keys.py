"""Key names whose value is a secret, whatever the value looks like."""

from __future__ import annotations

import functools
import re
import unicodedata

from agentops.engine.redaction._rule import INVISIBLE

# Keys whose value is a secret: the name ends with one of these words (after camelCase is split
# and the name lowercased: `githubToken`, `X-Api-Key`, `DB_PASSWORD`, `sessionId`). A word must
# stand alone, so `max_tokens`, `token_count`, `password_policy`, `pinned`, `spin`, `author` and
# `session_count` keep their values. `pass` needs a word before it (`db_pass`, not a count of
# passed tests under `pass`).
_SECRET_KEY = re.compile(
    r"^(?:.*[_\-. ])?(?:passwords?|passwd|passphrase|passcode|pwd|secrets?|token|"
    r"api[_-]?key|apikey|(?:secret[_-]?)?access[_-]?key|secret[_-]?key|"
    r"(?:auth|service|account|client|db|database|priv|private|encryption|signing|master)[_-]?key|"
    r"authorization|auth|credentials?|client[_-]?secret|card[_-]?number|cvv2?|cvc|pan|"
    r"pin|pin[_-]?code|otp|totp|mfa[_-]?code|cookies?|"
    r"(?:j|php)?sess(?:ion)?[_-]?(?:id|token|key)|ssn|social[_-]security[_-]number|iban)$"
    r"|^.*[_\-. ]pass$"
)
_CAMEL_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


@functools.lru_cache(maxsize=4096)
def is_secret_key(key: str) -> bool:
    """Whether the value under `key` is a secret. A key with other than ASCII in it is read
    without its invisible characters and in its compatibility form (`pass\u200bword`,
    `password` in fullwidth letters). Cached: a payload repeats its keys."""
    if not key.isascii():
        key = unicodedata.normalize("NFKC", INVISIBLE.sub("", key))
    return _SECRET_KEY.match(_CAMEL_HUMP.sub("_", key).lower()) is not None
