"""Secrets out of everything stored: `redacted` replaces them by "[redacted]".

It runs on every value the product stores (task input, model output, tool arguments and
results, failure messages, people's notes). Maintained detectors find what they cover:
detect-secrets' plugins (Yelp) the provider keys and tokens, python-stdnum the checksums of card
numbers, IBANs and US social security numbers. The rules written here cover what none of them
does: values after key words in prose and in other languages, command lines, `.env` and `.pgpass`
lines, private keys without their BEGIN line, key names in structured values.
docs/operations.md says which detector covers which form, and why each written rule remains.

Every rule finds spans in the same text, and the spans are replaced once. It is built to be cheap
on long text that holds no secret: a rule runs only when a substring search (or a byte
translation, for numbers and long tokens) shows it can match; a rule whose regex has no literal
to start from runs only on the lines holding the literal it needs. `text_redacted(text,
prechecks=False)` runs every rule everywhere: a test checks that the prechecks change no result.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector
from stdnum import iban, luhn
from stdnum.us import ssn

REDACTED = "[redacted]"

# --- Key names -------------------------------------------------------------------------------

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
    """Whether the value under `key` is a secret. Cached: a payload repeats its keys."""
    return _SECRET_KEY.match(_CAMEL_HUMP.sub("_", key).lower()) is not None


# --- Rules ------------------------------------------------------------------------------------

Span = tuple[int, int]


@dataclass(frozen=True)
class _Rule:
    """A pattern and what its matches hold.

    `needs`: substrings one of which every match contains (searched in the lowercased text when
    `lowered`); the rule runs only when one occurs, and with `per_line` only on the lines that
    hold one (for a regex with no literal to start from, or a case-insensitive one).
    `groups`: the groups that are the secret (the whole match
    when empty; a group that did not take part is skipped). `valid`: a check of the secret
    (a checksum, a library's own check). `lowered`: the pattern runs on the lowercased copy."""

    pattern: re.Pattern[str]
    needs: tuple[str, ...] = ()
    groups: tuple[int | str, ...] = ()
    valid: Callable[[re.Match[str], str], bool] | None = None
    lowered: bool = False
    per_line: bool = False
    # The secrets' spans in a match, when they are not groups of it.
    found: Callable[[str, re.Match[str]], Iterator[Span]] | None = None


def _library(
    plugin: Any,
    index: int,
    needs: tuple[str, ...],
    *,
    groups: tuple[int | str, ...] = (),
    lowered: bool = False,
    per_line: bool = False,
) -> _Rule:
    """A rule with one of a detect-secrets plugin's own patterns (`denylist[index]`)."""
    pattern = list(plugin.denylist)[index]
    return _Rule(pattern, needs, groups, lowered=lowered, per_line=per_line)


def _jwt_valid(match: re.Match[str], token: str) -> bool:
    return JwtTokenDetector.is_formally_valid(token)


# detect-secrets 1.5.0's plugins, each pattern with what it needs. Left out: the high-entropy
# plugins (they take git SHAs, UUIDs and base64 images), the keyword detector (see the key-word
# rules below), the private key detector (it finds the BEGIN line only: `_PRIVATE_KEYS` takes the
# whole block), IP addresses (no secret), Artifactory (its `AP…` password form takes upper-case
# words), Discord and Telegram (no literal to gate on: 5-11 ms per 500 KB), Cloudant, IBM and
# SoftLayer (their key-word prefixes "cl", "sl", "cos" occur in most text; the key-word rules
# take their `password=` forms).
_LIBRARY_RULES = [
    _library(AWSKeyDetector, 0, ("AKIA", "ASIA", "ABIA", "ACCA", "A3T")),
    _library(AWSKeyDetector, 1, ("aws",), groups=(1,), lowered=True, per_line=True),
    _library(AzureStorageKeyDetector, 0, ("AccountKey=",)),
    _library(BasicAuthDetector, 0, ("://",), groups=(1,)),
    _library(GitHubTokenDetector, 0, ("gh",)),
    *(_library(GitLabTokenDetector, i, ("gl",)) for i in (0, 2, 3, 4, 5, 6)),
    _library(GitLabTokenDetector, 1, ("GR1348941",)),
    _library(MailchimpDetector, 0, ("-us",), per_line=True),
    _library(NpmDetector, 0, ("_authToken=",), groups=(1,)),
    _library(OpenAIDetector, 0, ("T3BlbkFJ",)),
    *(_library(PypiTokenDetector, i, ("pypi-",)) for i in (0, 1)),
    _library(SendGridDetector, 0, ("SG.",)),
    _library(SlackDetector, 0, ("xox",), lowered=True, per_line=True),
    _library(SlackDetector, 1, ("hooks.slack.com",), lowered=True, per_line=True),
    _library(SquareOAuthDetector, 0, ("sq0csp-",)),
    _library(StripeDetector, 0, ("k_live_",)),
    *(_library(TwilioKeyDetector, i, (prefix,)) for i, prefix in ((0, "AC"), (1, "SK"))),
    _Rule(next(iter(JwtTokenDetector.denylist)), ("eyJ",), valid=_jwt_valid),
]


# Case-sensitive rules written here: forms no library covers, or covers only at one exact length
# (a key cut short or wrapped is still a key). Literal first and the word boundary checked behind
# it: the regex engine then jumps from one occurrence of the literal to the next instead of trying
# every position (a leading \b costs ~9 ms per pattern on a 500 KB string, this ~0.13 ms).
_AWS_ACCESS_KEY_ID = r"AKIA(?<![A-Za-z0-9]AKIA)[0-9A-Z]{16}(?![0-9A-Za-z])"
_AWS_SECRET = r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"
_BASE64 = "A-Za-z0-9+/"
_TOKEN_RULES = [
    # An AWS access key id, and the 40-character secret key written after it (same line or the
    # next, as the console's CSV and people's messages have them).
    _Rule(
        re.compile(rf"(?P<id>{_AWS_ACCESS_KEY_ID})(?:[\s\S]{{0,100}}?(?P<secret>{_AWS_SECRET}))?"),
        ("AKIA",),
        ("id", "secret"),
    ),
    # OpenAI-style keys (`sk-proj-…`, `sk-ant-…`).
    _Rule(re.compile(r"sk-(?<![A-Za-z0-9]sk-)[A-Za-z0-9_-]{16,}"), ("sk-",)),
    # Stripe secret and restricted keys, webhook signing secrets.
    _Rule(
        re.compile(r"k_(?:live|test)_(?<![A-Za-z0-9][rs]k_[a-z]{4}_)(?<=[rs]k_[a-z]{4}_)\w{10,}"),
        ("k_live_", "k_test_"),
    ),
    _Rule(re.compile(r"whsec_(?<![A-Za-z0-9]whsec_)[A-Za-z0-9+/=]{10,}"), ("whsec_",)),
    # GitHub: classic tokens at any length, fine-grained `github_pat_…`.
    _Rule(re.compile(r"gh[pousr]_(?<![A-Za-z0-9]gh[pousr]_)[A-Za-z0-9]{20,}"), ("gh",)),
    _Rule(re.compile(r"github_pat_(?<![A-Za-z0-9]github_pat_)\w{20,}"), ("github_pat_",)),
    # GitLab personal, deploy, runner and other tokens at any length.
    _Rule(
        re.compile(
            r"gl(?<![A-Za-z0-9]gl)(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent|oas|sa)-[\w-]{16,}"
        ),
        ("gl",),
    ),
    # Slack tokens.
    _Rule(re.compile(r"xox[abeoprs]-(?<![A-Za-z0-9]xox[abeoprs]-)[A-Za-z0-9-]{10,}"), ("xox",)),
    _Rule(re.compile(r"xapp-(?<![A-Za-z0-9]xapp-)[A-Za-z0-9-]{10,}"), ("xapp-",)),
    # Google API keys and OAuth access tokens and client secrets.
    _Rule(re.compile(r"AIza(?<![A-Za-z0-9_-]AIza)[\w-]{30,}"), ("AIza",)),
    _Rule(re.compile(r"ya29\.(?<![\w-]ya29\.)[\w-]{16,}"), ("ya29.",)),
    _Rule(re.compile(r"GOCSPX-(?<![\w-]GOCSPX-)[\w-]{16,}"), ("GOCSPX-",)),
    # SendGrid keys at any length.
    _Rule(re.compile(r"SG\.(?<![\w.]SG\.)[\w-]{16,}\.[\w-]{16,}"), ("SG.",)),
    # Twilio API key and account SIDs (32 hexadecimal digits), upper or lower case.
    _Rule(
        re.compile(r"(?:SK|AC)(?<![A-Za-z0-9]SK)(?<![A-Za-z0-9]AC)[0-9a-fA-F]{32}(?![\w])"),
        ("SK", "AC"),
    ),
    # npm, Hugging Face, Shopify, DigitalOcean tokens; age secret keys.
    _Rule(re.compile(r"npm_(?<![A-Za-z0-9]npm_)[A-Za-z0-9]{30,}"), ("npm_",)),
    _Rule(re.compile(r"hf_(?<![A-Za-z0-9]hf_)[A-Za-z0-9]{30,}"), ("hf_",)),
    _Rule(re.compile(r"shp(?:at|ca|pa|ss)_(?<![A-Za-z0-9]shp\w\w_)[a-fA-F0-9]{32}"), ("shp",)),
    _Rule(re.compile(r"do[por]_v1_(?<![A-Za-z0-9]do\w_v1_)[a-f0-9]{64}"), ("_v1_",)),
    _Rule(re.compile(r"AGE-SECRET-KEY-1[0-9A-Z]{50,}"), ("AGE-SECRET-KEY-1",)),
    # Webhook URLs whose path is the secret: Slack (any scheme, workflows and triggers too),
    # Discord, Microsoft Teams.
    _Rule(
        re.compile(r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<path>[\w/+-]{16,})"),
        ("hooks.slack.com/",),
        ("path",),
    ),
    _Rule(
        re.compile(r"/api/webhooks/(?P<path>\d+/[\w-]{20,})"),
        ("/api/webhooks/",),
        ("path",),
    ),
    _Rule(
        re.compile(r"\.webhook\.office\.com/webhookb2/(?P<path>[\w@/-]{20,})"),
        (".webhook.office.com/",),
        ("path",),
    ),
    # JWTs: three base64url segments, the first a JSON header ("eyJ" is `{"` encoded).
    _Rule(
        re.compile(r"eyJ(?<![A-Za-z0-9_-]eyJ)[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*"),
        ("eyJ",),
    ),
    # The password of a URL's credentials (postgres://user:password@host).
    _Rule(re.compile(r"://[^\s/?#@:]*:(?P<pw>[^\s/?#@]+)@"), ("://",), ("pw",)),
]

# Private keys: PEM and PGP blocks (to the end of the text when the END line is missing), and the
# base64 body pasted without its BEGIN line. A DER private key starts with a SEQUENCE and then
# its version, an INTEGER: in base64 "MII" + 3 characters + "IBA" (2-byte length: RSA, DSA,
# PKCS#8, PKCS#12), "MIG" + 1 + "AgE" (1-byte length: PKCS#8 EC), "M" + 2 + "CAQ" (EC, Ed25519);
# an encrypted PKCS#8 key starts with the PKCS#5 object id ("BgkqhkiG9w0BBQ"). A public key, a
# certificate or a CMS message starts with a SEQUENCE or an object id after the first one, never
# with that INTEGER. An OpenSSH key's body starts with "openssh-key-v1" in base64, a PuTTY key's
# body follows its "Private-Lines:" line. The body runs over following lines of base64.
_BODY_LINES = rf"[{_BASE64}]*={{0,2}}(?:(?:\r?\n|\\n)[ \t]*[{_BASE64}]{{16,}}={{0,2}})*"
_PRIVATE_KEYS = [
    _Rule(
        re.compile(
            r"-----BEGIN [A-Z ]*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
            r"(?:-----END [A-Z ]*PRIVATE KEY(?: BLOCK)?-----|\Z)"
        ),
        ("-----BEGIN ",),
    ),
    _Rule(
        re.compile(
            rf"M(?<![{_BASE64}]M)(?:II[{_BASE64}]{{3}}IBA|IG[{_BASE64}]AgE|"
            rf"[{_BASE64}][AEIMQUYcgkosw048]CAQ|II[{_BASE64}]{{5,8}}BgkqhkiG9w0BBQ)"
            rf"[{_BASE64}]{{24,}}{_BODY_LINES}"
        ),
        ("MII", "MIG", "CAQ"),
    ),
    _Rule(
        re.compile(rf"b3BlbnNzaC1rZXktdjE(?<![{_BASE64}]b3BlbnNzaC1rZXktdjE){_BODY_LINES}"),
        ("b3BlbnNzaC1rZXktdjE",),
    ),
    _Rule(
        re.compile(rf"Private-Lines: \d+\r?\n(?P<body>{_BODY_LINES})"),
        ("Private-Lines:",),
        ("body",),
    ),
]

# Command lines: `curl -u user:password` (`--user`, quoted or not; a numeric `uid:gid` such as
# docker's `-u 1000:1000` is no password), `mysql -pPASSWORD` (the password glued to -p, on a
# MySQL or MariaDB client's line; `-p` alone prompts, `-P` is the port), `sshpass -p PASSWORD`,
# `redis-cli -a PASSWORD`.
_QUOTED_OR_BARE = r"(?:(?P<quote>[\"'])(?P<quoted>[^\n]*?)(?P=quote)|(?P<bare>[^\s\"'`]+))"
_VALUE_GROUPS = ("quoted", "bare")
_COMMAND_RULES = [
    _Rule(
        re.compile(
            r"-(?<![\w-]-)(?:u|-user)(?:[ \t]+|=)?"
            r"(?:(?P<quote>[\"'])(?P<user1>[^:\n\"']*):(?P<quoted>[^\n]*?)(?P=quote)"
            r"|(?P<user2>[^\s:\"'`]+):(?P<bare>[^\s\"'`]+))"
        ),
        ("-u",),
        _VALUE_GROUPS,
        valid=lambda match, password: not password.isdigit(),
    ),
    _Rule(
        re.compile(
            r"(?:mysql|mariadb)(?<![\w-]mysql)(?<![\w-]mariadb)[\w-]*[ \t][^\n]*?"
            rf"(?<=[ \t])-p{_QUOTED_OR_BARE}"
        ),
        ("mysql", "mariadb"),
        _VALUE_GROUPS,
    ),
    _Rule(re.compile(rf"sshpass[ \t]+-p[ \t]*{_QUOTED_OR_BARE}"), ("sshpass",), _VALUE_GROUPS),
    _Rule(
        re.compile(rf"redis-cli[^\n]*?[ \t]-a[ \t]+{_QUOTED_OR_BARE}"),
        ("redis-cli",),
        _VALUE_GROUPS,
    ),
]

# `.env` lines: an upper-case name ending in a secret word at the start of a line, `=`, a value
# (`DB_PASS=…`, `export STRIPE_KEY=…`, `APP_SECRET="…"`). A .pgpass line:
# host:port:database:user:password, the port a number or `*`, the host with a letter or a dot
# in it (so a time or a count written with colons is no .pgpass line), `\:` inside a field.
_ENV_WORDS = r"(?:KEY|PASS|PASSWD|PASSWORD|PWD|SECRET|TOKEN|AUTH|CREDENTIALS?|PASSPHRASE|PIN|SALT)"
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]*")
_FIELD = r"(?:\\.|[^\s:\\\"'`])+"
_PGPASS_HOST = re.compile(r"[\w.*\[\]-]*[A-Za-z.*][\w.*\[\]-]*")


def _env_line(match: re.Match[str], value: str) -> bool:
    """Whether the name before the match is an upper-case variable standing alone."""
    return (
        _ENV_NAME.fullmatch(match.string, _word_start(match.string, match.start()), match.start())
        is not None
    )


def _word_start(text: str, end: int) -> int:
    """Where the word ending at `end` starts: after a space, a quote, `=` or `;` (255 at most)."""
    begin, limit = end, max(0, end - 255)
    while begin > limit and text[begin - 1] not in " \t\r\n\"'`=;":
        begin -= 1
    return begin


def _pgpass_line(match: re.Match[str], value: str) -> bool:
    """Whether the match follows a host name standing alone (after a space, a quote or `=`)."""
    text = match.string
    return _PGPASS_HOST.fullmatch(text, _word_start(text, match.start()), match.start()) is not None


_LINE_RULES = [
    _Rule(
        re.compile(rf"_(?<=[A-Z0-9]_){_ENV_WORDS}(?:_BASE)?[ \t]*=[ \t]*{_QUOTED_OR_BARE}"),
        tuple(
            f"_{word}"
            for word in (
                "KEY",
                "PASS",
                "PWD",
                "SECRET",
                "TOKEN",
                "AUTH",
                "CREDENTIAL",
                "PIN",
                "SALT",
            )
        ),
        _VALUE_GROUPS,
        valid=_env_line,
    ),
    _Rule(
        re.compile(rf":(?:\d{{1,5}}|\*):{_FIELD}:{_FIELD}:(?P<pw>{_FIELD})(?![^\s\"'`,;])"),
        (":",),
        ("pw",),
        valid=_pgpass_line,
    ),
]

# --- Key words in text, on the lowercased copy ------------------------------------------------

# A case-insensitive regex has no literal to jump to (~100 ms on 500 KB), so these run on a
# lowercased copy of the text, literal first. A match's group "quoted" or "bare" is the secret.
_SPACE = "[ \\t\u00a0\u202f\u3000]"
_SEPARATOR = rf"(?:\\?[\"'])?{_SPACE}*(?:=>|:=|[:=\uff1a]){_SPACE}*"  # \uff1a: fullwidth colon
# "is" in the languages below: `password is X`, `Passwort ist X`, `Kennwort lautet X`, `mot de
# passe est X`, `contraseña es X`, `пароль —  X`, `密码是X`, `パスワードはX`, `비밀번호는 X`.
_IS = (
    rf"(?:{_SPACE}+(?:(?:is|was|ist|lautet|est|es|era|é|è|это)(?!\w)|\u2014|\u2013)"
    rf"|{_SPACE}*(?:是|为|為|は|는|은)){_SPACE}*:?{_SPACE}*"
)
# A bare value ends at a space, a quote or backquote, a bracket, a comma or a semicolon, CJK
# text or punctuation, or at "&" when the next query parameter follows it ("?token=X&page=2").
_BARE = (
    r"(?:[^\s\"'`<>,;&\\{}\[\]()\uff0c\u3002\uff1b\u3001\uff1a\uff08\uff09\u300c-\u300f"
    r"\u3000-\u30ff\u3400-\u9fff\uac00-\ud7af]"
    r"|&(?![a-z0-9_.-]+=))+"
)
_VALUE = (
    r"(?:(?P<quote>\\?[\"'])(?P<quoted>(?:(?!(?P=quote))[^\n]){1,400})(?P=quote)"
    r"|(?:(?:basic|bearer|token|digest)[ \t]+)?(?!(?:basic|bearer|token|digest)[ \t])"
    rf"(?P<bare>{_BARE}))"
)


def _word(literal: str, pattern: str, *, boundary: bool = True) -> _Rule:
    """A key-word rule on the lowercased copy that starts with `literal` (checked to stand
    alone behind it when `boundary`)."""
    behind = rf"(?<![a-z0-9]{re.escape(literal)})" if boundary else ""
    return _Rule(
        re.compile(re.escape(literal) + behind + pattern), (literal,), _VALUE_GROUPS, lowered=True
    )


# What a password is for, between the word and its value: `password for the admin account: X`,
# `Passwort für den Server ist X`.
_FOR = r"[ \t]+(?:for|of|to|für|pour|para|per)[ \t]+[^\n:=\uff1a\"'`]{1,40}?"

# `Bearer <token>` anywhere.
_BEARER = [
    _Rule(
        re.compile(r"bearer(?<![a-z0-9_]bearer)[ \t]+(?P<bare>[a-z0-9._~+/=-]{8,})"),
        ("bearer",),
        ("bare",),
        lowered=True,
    )
]
# `password: X`, `db_password=X`, `"password": "X"`, `my password is X`, `pw=X`, `pwd: X`,
# `passphrase: X`, `passcode is X`, `Passwort: X`, `--password X`, `DB_PASS=X`, `pass=X`.
_PASSWORDS = [
    _word(
        "pass",
        rf"(?:w(?:or)?ds?|wort|phrase|code)(?:{_FOR})?(?:{_SEPARATOR}|{_IS}){_VALUE}",
        boundary=False,
    ),
    _word("pw", rf"d?(?:{_SEPARATOR}|{_IS}){_VALUE}"),
    _word("--pass", rf"(?:word)?[ \t]+{_VALUE}"),
    _Rule(
        re.compile(rf"pass(?<=[_.-]pass){_SEPARATOR}{_VALUE}"),
        ("pass",),
        _VALUE_GROUPS,
        lowered=True,
    ),
    _word("pass", rf"(?:\\?[\"'])?[ \t]*={_VALUE}"),
]
# Key words with a separator: `client_secret=X`, `secret: X`, `token=X`, `github_token: X`,
# `?access_token=X`, `api_key=X`, `x-api-key: X`, `aws_secret_access_key = X`, `private_key: X`,
# `AccountKey=X`, `Authorization: Basic X`, `auth: X`, `session_id=X`.
_ASSIGNMENTS = [
    _word("secret", rf"{_SEPARATOR}{_VALUE}", boundary=False),
    _word("token", rf"{_SEPARATOR}{_VALUE}", boundary=False),
    _Rule(
        re.compile(
            r"key(?:(?<=apikey)|(?<=api_key)|(?<=api-key)|(?<=accesskey)|(?<=access_key)|"
            r"(?<=access-key)|(?<=secretkey)|(?<=secret_key)|(?<=secret-key)|(?<=accountkey)|"
            r"(?<=account_key)|(?<=sharedaccesskey)|(?<=privatekey)|(?<=private_key)|"
            rf"(?<=private-key)){_SEPARATOR}{_VALUE}"
        ),
        ("key",),
        _VALUE_GROUPS,
        lowered=True,
    ),
    _Rule(
        re.compile(
            rf"auth(?:orization)?(?<![a-z0-9]auth)(?<![a-z0-9]authorization){_SEPARATOR}{_VALUE}"
        ),
        ("auth",),
        _VALUE_GROUPS,
        lowered=True,
    ),
    _Rule(
        re.compile(
            rf"sess(?:ion)?[_-]?(?:id|token|key)(?<![a-z0-9]sess)(?<![a-z0-9]session)"
            rf"{_SEPARATOR}{_VALUE}"
        ),
        ("sess",),
        _VALUE_GROUPS,
        lowered=True,
    ),
    # The signature of an Azure shared access signature URL (`?sv=…&sig=…`).
    _Rule(
        re.compile(r"sig=(?<=[?&]sig=)(?P<bare>[^\s&\"'`<>#]+)"),
        ("sig=",),
        ("bare",),
        lowered=True,
    ),
    # A cookie header's value, to the end of its line.
    _Rule(
        re.compile(
            r"cookies?(?<![a-z0-9]cookie)(?<![a-z0-9]cookies)(?<![a-z0-9]cookies)"
            rf"{_SEPARATOR}(?:(?P<quote>\\?[\"'])(?P<quoted>[^\n]{{1,4000}}?)(?P=quote)"
            r"|(?P<bare>[^\s\"'][^\n\"']*))"
        ),
        ("cookie",),
        _VALUE_GROUPS,
        lowered=True,
    ),
]
# Numbers after a key word: `PIN: 4821`, `my pin is 4821`, `OTP 123456`, `verification code:
# 123456`, `CVV 123` (digits only: `pin: true`, `the code is wrong` stay).
_CODES = [
    _Rule(
        re.compile(
            rf"{word}(?<![a-z0-9]{word})(?:(?:{_SPACE}|-)?(?:code|number|no\.?|#))?"
            rf"(?:{_SEPARATOR}|{_IS}|{_SPACE}+)(?P<bare>\d{{3,10}})(?![\w.,]\d)(?!\w)"
        ),
        (word,),
        ("bare",),
        lowered=True,
    )
    for word in ("pin", "otp", "totp", "cvv", "cvc", "cvv2", "passcode")
] + [
    _Rule(
        re.compile(
            rf"(?:one[- ]time|verification|security|2fa|mfa|login|auth) code"
            rf"(?:{_SEPARATOR}|{_IS}|{_SPACE}+)(?P<bare>\d{{3,10}})(?![\w.,]\d)(?!\w)"
        ),
        ("code",),
        ("bare",),
        lowered=True,
    )
]
# The word for password in other languages (detect-secrets' keyword rules know English and
# Spanish only), with a separator or their "is".
_WORDS_ASCII = (
    "passwort", "kennwort", "mot de passe", "mdp", "contrasena", "clave", "senha", "wachtwoord",
    "haslo", "sifre", "parola", "salasana", "adgangskode", "passord", "losenord", "heslo",
    "jelszo", "geslo", "lozinka", "parol",
)  # fmt: skip
_WORDS_OTHER = (
    "contraseña", "пароль", "密码", "密碼", "口令", "パスワード", "暗証番号", "비밀번호",
    "hasło", "şifre", "lösenord", "jelszó", "geslo", "лозинка", "парола", "κωδικός",
    "كلمة المرور", "كلمة السر", "סיסמה", "पासवर्ड", "รหัสผ่าน", "mật khẩu",
)  # fmt: skip
_CJK_WORDS = {"密码", "密碼", "口令", "パスワード", "暗証番号", "비밀번호"}


def _foreign(word: str) -> _Rule:
    """`word: X` and `word is X` for a word that means password, standing alone (CJK has no
    spaces between words: nothing is checked behind those)."""
    behind = "" if word in _CJK_WORDS else rf"(?<![^\W\d_]{re.escape(word)})"
    return _Rule(
        re.compile(rf"{re.escape(word)}{behind}(?:{_SEPARATOR}|{_IS}){_VALUE}"),
        (word,),
        _VALUE_GROUPS,
        lowered=True,
    )


_FOREIGN_ASCII = [_foreign(word) for word in _WORDS_ASCII]
_FOREIGN_OTHER = [_foreign(word) for word in _WORDS_OTHER]

# Values after a key word that are not secrets: prose ("the password is incorrect") and JSON
# literals ("token": null).
_NOT_SECRETS = frozenset(
    word
    for words in (
        "null none nil true false undefined required optional missing empty blank hidden",
        "incorrect wrong invalid valid expired not too the a an set unset reset changed",
        "weak strong",
        # The same words in the languages the rules read.
        "falsch ungültig abgelaufen leer faux incorrect vide incorrecto incorrecta inválido",
        "inválida vacío неверный неправильный пустой",
        # Code: a type annotation (`password: str`), an expression (`token = await f()`).
        "str string int bool bytes any optional self this await new function",
    )
    for word in words.split()
)

# --- Numbers: cards, IBANs, US social security numbers -----------------------------------------

# Card numbers: 13 to 19 digits, the first 2-6 (the payment networks' ranges), passing the Luhn
# check (python-stdnum), written as one run or as groups of 3 or more digits (so a date's month
# and day are no part of one) between spaces (one or two) or dashes, or between dots or slashes
# (two at least, not mixed with the others: a decimal has one dot), not part of a longer number
# or a decimal. A candidate is any run of 13 or more digits with separators between; `_cards`
# looks for cards inside it (a quantity written before a card does not hide it).
_CARD_RUN = re.compile(r"(?<!\d)\d(?:(?:  ?|[.\-/])?\d){12,}")
_CARD_SEPARATOR = re.compile(r"(  ?|[.\-/])")


def luhn_valid(digits: str) -> bool:
    """Whether `digits` pass the Luhn check every payment card number passes."""
    return luhn.is_valid(digits)


def _card_digits(digits: str) -> bool:
    return 13 <= len(digits) <= 19 and "2" <= digits[0] <= "6" and luhn_valid(digits)


def _is_card(groups: list[str], separators: list[str], first: int, last: int) -> bool:
    """Whether groups[first..last] (joined by separators[first..last-1]) are a card number."""
    between = separators[first:last]
    if (first > 0 and separators[first - 1] in "./") or (
        last < len(separators) and separators[last] in "./"
    ):
        return False  # part of a decimal or a dotted number
    if between:
        for mark in "./":
            marks = between.count(mark)
            if marks and (marks != len(between) or marks < 2):
                return False  # dots only with dots, slashes with slashes, two at least
        if any(len(group) < 3 for group in groups[first : last + 1]):
            return False
    return _card_digits("".join(groups[first : last + 1]).translate(_ASCII_DIGITS))


# Unicode's other decimal digits as ASCII ones, for the checksums.
_ASCII_DIGITS = {
    code: str(int(chr(code)))
    for code in range(0x80, 0x110000)
    if not 0xD800 <= code <= 0xDFFF and chr(code).isdecimal()
}


def _glued(text: str, start: int, end: int) -> bool:
    """Whether text[start:end] is glued to a letter or digit, directly or through a dash."""
    before = text[max(0, start - 2) : start]
    after = text[end : end + 2]
    return (
        (before[-1:].isalnum() or before[-1:] == "_")
        or (before[-1:] == "-" and before[:1].isalnum())
        or (after[:1].isalnum() or after[:1] == "_")
        or (after[:1] == "-" and after[1:].isalnum())
    )


def _card_spans(text: str, match: re.Match[str]) -> Iterator[Span]:
    """The cards in a candidate run: from each group on, the longest span of groups that is a
    card, else the group stays as it is."""
    if _glued(text, match.start(), match.end()):
        return  # part of a longer identifier (a UUID, a hyphenated reference)
    parts = _CARD_SEPARATOR.split(match.group())
    groups, separators = parts[0::2], parts[1::2]
    offsets, position = [], match.start()
    for index, group in enumerate(groups):
        offsets.append(position)
        position += len(group) + (len(separators[index]) if index < len(separators) else 0)
    first = 0
    while first < len(groups):
        last, count, found = first, 0, -1
        while last < len(groups) and count + len(groups[last]) <= 19:
            count += len(groups[last])
            if count >= 13 and _is_card(groups, separators, first, last):
                found = last
            last += 1
        if found >= 0:
            yield offsets[first], offsets[found] + len(groups[found])
            first = found + 1
        else:
            first += 1


# An IBAN: a country code, two check digits, then 11 to 30 letters or digits, in groups of four
# or not; valid by python-stdnum (the checksum and the country's format). A candidate longer
# than its IBAN (another group glued to it) is cut back to the longest valid prefix.
_IBAN_RUN = re.compile(
    r"(?<![A-Za-z0-9])[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?"
)


def _iban_spans(text: str, match: re.Match[str]) -> Iterator[Span]:
    candidate = match.group()
    compact = candidate.replace(" ", "")
    for length in range(len(compact), 14, -1):
        if iban.is_valid(compact[:length]):
            end, kept = match.start(), 0
            while kept < length:
                kept += text[end] != " "
                end += 1
            yield match.start(), end
            return


# A US social security number, valid by python-stdnum (no 000, 666 or 9xx area, no 00 group,
# no 0000 serial, not an advertised number), written 123-45-6789, 123 45 6789 or 123456789, only
# after "SSN", "social security" or "SS#" on the same line: nine digits alone are an order
# number as often as anything.
_SSN_CONTEXT = re.compile(
    r"(?:ssn|ss#|ss no|social security|sozialversicherungsnummer|numéro de sécurité sociale)"
    r"(?<![a-z0-9]ssn)(?<![a-z0-9]ss#)(?<![a-z0-9]ss no)[^\n]{0,80}"
)
_SSN = re.compile(r"(?<![\d-])(\d{3})([- ]?)(\d{2})\2(\d{4})(?![\d-])")


def _ssn_spans(text: str, match: re.Match[str]) -> Iterator[Span]:
    for number in _SSN.finditer(text, match.start(), match.end()):
        if ssn.is_valid("".join(number.group(1, 3, 4))):
            yield number.span()


_SSN_RULE = _Rule(
    _SSN_CONTEXT,
    ("ssn", "ss#", "ss no", "social security", "sozialversicherungsnummer", "sécurité sociale"),
    lowered=True,
    found=_ssn_spans,
)


# --- Prechecks ---------------------------------------------------------------------------------

# The first byte, in UTF-8, of every non-ASCII character `\d` matches (Unicode's decimal digits:
# Arabic-Indic, Indic scripts, fullwidth and others; a test enumerates them with this Python).
# CJK, Cyrillic, Greek and Latin letters start with other bytes.
DIGIT_LEAD_BYTES = frozenset({0xD9, 0xDB, 0xDF, 0xE0, 0xE1, 0xEA, 0xEF, 0xF0})
# A text's UTF-8 bytes mapped so that every character `\d` matches leaves one "0" (an ASCII
# digit, or a lead byte in DIGIT_LEAD_BYTES: this over-counts, never under-counts), an ASCII
# upper-case letter an "A", any other byte "x". Deleted: UTF-8 continuation bytes (one byte per
# character is left), and the separators a card or an IBAN may have.
_NUMBER_BYTES = bytes.maketrans(
    bytes(range(256)),
    bytes(
        ord("0")
        if chr(b) in "0123456789" or b in DIGIT_LEAD_BYTES
        else ord("A")
        if chr(b) in "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
        else ord("x")
        for b in range(256)
    ),
)
_NUMBER_BYTES_DELETED = b" -./" + bytes(range(0x80, 0xC0))
# Zero-width and invisible characters someone may leave inside a secret (or a tool may insert).
_INVISIBLE = re.compile("[\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]")


class _Text:
    """A text and what the prechecks learn about it, each computed once when first asked."""

    def __init__(self, text: str, *, prechecks: bool) -> None:
        self.text = text
        self.prechecks = prechecks
        self._lowered: str | None = None
        self._bytes: bytes | None = None
        self._numbers: bytes | None = None
        self._found: frozenset[str] | None = None
        self._occurs: dict[tuple[str, bool], bool] = {}
        self._chars: dict[tuple[str, bool], bool] = {}

    @property
    def lowered(self) -> str:
        if self._lowered is None:
            self._lowered = _lowered(self.text)
        return self._lowered

    @property
    def data(self) -> bytes:
        if self._bytes is None:
            text = self.text
            self._bytes = (
                text.encode("ascii") if text.isascii() else text.encode("utf-8", "surrogatepass")
            )
        return self._bytes

    def numbers(self) -> bytes:
        if self._numbers is None:
            self._numbers = self.data.translate(_NUMBER_BYTES, _NUMBER_BYTES_DELETED)
        return self._numbers

    def may_hold_card(self) -> bool:
        """False when `_CARD_RUN` cannot match: a match is 13 or more digits with separators
        between, so with those deleted it is a run of 13 digits, in the translated bytes a run
        of 13 "0"s. The card regex tries every digit (~10 ms on 500 KB of text with a digit
        every few characters); this is an encoding, a byte translation and a substring search
        (0.2-0.5 ms). Text in a script that shares its first byte with digits (Devanagari,
        say) may still get the regex."""
        if not self.prechecks:
            return True
        return len(self.text) >= 13 and b"0" * 13 in self.numbers()

    def may_hold_iban(self) -> bool:
        """False when `_IBAN_RUN` cannot match: a match starts with two upper-case letters and
        two digits, "AA00" in the translated bytes."""
        if not self.prechecks:
            return True
        return len(self.text) >= 15 and b"AA00" in self.numbers()

    def holds(self, rule: _Rule) -> bool:
        """Whether `rule` may match: one of the substrings it needs occurs."""
        if not self.prechecks:
            return True
        if len(self.text) <= _SHORT:
            target = self.lowered if rule.lowered else self.text
            found = self.literals_found()
            literal_found = any(
                literal.lower() in found and (rule.lowered or literal in target)
                for literal in rule.needs
            )
        elif id(rule) in _DIRECT:
            # The regex starts with the literal: it finds where it occurs as fast as a
            # substring search would, so only its characters are looked for.
            literal_found = self.has_characters(rule.needs[0], rule.lowered)
        else:
            literal_found = any(self.occurs(literal, rule.lowered) for literal in rule.needs)
        return literal_found

    def literals_found(self) -> frozenset[str]:
        """The rules' literals (lowercased) in a short text: one regex over it."""
        if self._found is None:
            if _ANY_LITERAL.search(self.lowered) is None:
                self._found = frozenset()
                return self._found
            self._found = frozenset(
                literal for match in _LITERALS.findall(self.lowered) for literal in _PREFIXES[match]
            )
        return self._found

    def occurs(self, literal: str, lowered: bool) -> bool:
        """Whether `literal` occurs in a long text (in its lowercased copy when `lowered`).
        Each of its characters is looked for first, the rarest first, in the text itself (in
        either case when `lowered`): a one-character search is a memchr (~0.01 ms on 500 KB), a
        longer one ~1 ms, and the lowercased copy is made only when a literal may occur in it.
        Each answer is kept for the next rule that asks."""
        key = (literal, lowered)
        if key not in self._occurs:
            present = self.has_characters(literal, lowered)
            target = self.lowered if lowered and present else self.text
            self._occurs[key] = present and (len(literal) == 1 or literal in target)
        return self._occurs[key]

    def has_characters(self, literal: str, lowered: bool) -> bool:
        """Whether every character of `literal` occurs (rarest first)."""
        return all(self._has(char, lowered) for char in _RAREST_FIRST[literal])

    def _has(self, char: str, lowered: bool) -> bool:
        """Whether `char` occurs in the text (in the lowercased copy when `lowered`: for ASCII
        text, the character in either case; other text has characters whose lowercase is an
        ASCII letter, the Kelvin sign's "k", so its copy is made)."""
        key = (char, lowered)
        if key not in self._chars:
            text = self.text
            if not lowered:
                self._chars[key] = char in text
            elif text.isascii():
                self._chars[key] = char in text or char.upper() in text
            else:
                self._chars[key] = char in self.lowered
        return self._chars[key]

    def ranges(self, rule: _Rule) -> Iterator[Span]:
        """Where to run `rule`: the whole text, or the lines holding what it needs."""
        if not (rule.per_line and self.prechecks):
            yield 0, len(self.text)
            return
        target = self.lowered if rule.lowered else self.text
        lines: set[int] = set()
        for literal in rule.needs:
            index = target.find(literal)
            while index >= 0:
                start = target.rfind("\n", 0, index) + 1
                end = target.find("\n", index)
                end = len(target) if end < 0 else end
                if start not in lines:
                    lines.add(start)
                    yield start, end
                index = target.find(literal, end)


def _lowered(text: str) -> str:
    """`text` in lower case, one character for one, so that positions carry over."""
    lowered = text.lower()
    if len(lowered) == len(text):
        return lowered
    # "İ" (U+0130) is the one character that lowercases to two (a test checks it): an "i" here.
    return text.replace("\u0130", "i").lower()


# --- Finding and replacing ---------------------------------------------------------------------


def _rule_spans(text: _Text, rule: _Rule) -> Iterator[Span]:
    target = text.lowered if rule.lowered else text.text
    keyword = rule.groups == _VALUE_GROUPS and rule.lowered
    for start, end in text.ranges(rule):
        for match in rule.pattern.finditer(target, start, end):
            if rule.found is not None:
                yield from rule.found(text.text, match)
                continue
            found = [group for group in rule.groups if match.group(group) is not None]
            for group in found or ([] if rule.groups else [0]):
                begin, finish = match.span(group)
                if begin == finish:
                    continue
                if keyword and group == "bare" and finish - begin > 1:
                    if target[finish - 1] in ".:":
                        finish -= 1  # the full stop that ends the sentence
                    if target[begin:finish] in _NOT_SECRETS or target[finish : finish + 1] in (
                        "(",
                        "[",
                    ):
                        continue  # a word of prose, a call or a subscript in code
                if rule.valid is not None and not rule.valid(match, text.text[begin:finish]):
                    continue
                yield begin, finish


def _replaced(text: str, spans: list[Span]) -> str:
    """`text` with every span (overlapping spans merged) replaced by REDACTED."""
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    pieces: list[str] = []
    position = 0
    for start, end in merged:
        pieces += [text[position:start], REDACTED]
        position = end
    pieces.append(text[position:])
    return "".join(pieces)


_CASE_RULES = _LIBRARY_RULES + _TOKEN_RULES + _PRIVATE_KEYS + _COMMAND_RULES + _LINE_RULES
_WORD_RULES = _BEARER + _PASSWORDS + _ASSIGNMENTS + _CODES + _FOREIGN_ASCII + [_SSN_RULE]
RULES = _CASE_RULES + _WORD_RULES + _FOREIGN_OTHER

# Texts up to this length look for every rule's literal with one regex (a trie of them, each
# position looked ahead from, so that overlapping literals are all found): a few microseconds,
# where a search per rule costs ~100 calls. A longer text searches each literal (a fast
# substring search: ~0.1-0.3 ms per 500 KB), the trie's regex being slower there (~80 ms).
_SHORT = 4096


def _trie(words: set[str]) -> str:
    """A regex matching any of `words`, as a trie (one branch per first character)."""
    tree: dict[str, Any] = {}
    for word in words:
        node = tree
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def branch(node: dict[str, Any]) -> str:
        alternatives = [
            re.escape(char) + branch(rest) for char, rest in sorted(node.items()) if char
        ]
        if not alternatives:
            return ""
        either = alternatives[0] if len(alternatives) == 1 else f"(?:{'|'.join(alternatives)})"
        return f"(?:{either})?" if "" in node else either

    return branch(tree)


_ALL_LITERALS = {literal.lower() for rule in RULES for literal in rule.needs}
_ANY_LITERAL = re.compile(_trie(_ALL_LITERALS))
_LITERALS = re.compile(f"(?=({_ANY_LITERAL.pattern}))")
# The literals found by a match of the trie: the longest one there, and those it starts with.
_PREFIXES = {
    literal: frozenset(other for other in _ALL_LITERALS if literal.startswith(other))
    for literal in _ALL_LITERALS
}


# Each literal's characters, the rarest in text first (the commonest letters of English and
# JSON last), for `_Text.occurs`.
_COMMON = ' etaoinsrhldcu"mfpgwyb,.:0123456789'
_RAREST_FIRST = {
    literal: tuple(
        sorted(
            set(literal),
            key=lambda char: _COMMON.find(char.lower()) if char.lower() in _COMMON else -1,
        )
    )
    for rule in RULES
    for needed in rule.needs
    for literal in (needed, needed.lower())
}
# The rules whose regex starts with the one literal they need (case-sensitive regexes only: a
# regex with IGNORECASE has no literal to search for).
_DIRECT = {
    id(rule)
    for rule in RULES
    if len(rule.needs) == 1
    and not rule.pattern.flags & re.IGNORECASE
    and not rule.per_line
    and rule.pattern.pattern.startswith(re.escape(rule.needs[0]))
}
# The rules that need each literal (lowercased), in the order of RULES.
_RULES_NEEDING = {
    literal: [rule for rule in RULES if literal in {need.lower() for need in rule.needs}]
    for literal in _ALL_LITERALS
}
_ORDER = {id(rule): index for index, rule in enumerate(RULES)}


def _candidates(text: _Text) -> list[_Rule]:
    """The rules to try on the text: in a short one, those whose literal the trie found."""
    value = text.text
    if not text.prechecks:
        return RULES
    if len(value) <= _SHORT:
        found = text.literals_found()
        if not found:
            return []
        rules = {id(rule): rule for literal in found for rule in _RULES_NEEDING[literal]}
        return sorted(rules.values(), key=lambda rule: _ORDER[id(rule)])
    return RULES if not value.isascii() else _CASE_RULES + _WORD_RULES


def _spans(text: _Text) -> list[Span]:
    """The spans of every secret the rules find in the text."""
    spans: list[Span] = []
    value = text.text
    for rule in _candidates(text):
        if text.holds(rule):
            spans += _rule_spans(text, rule)
    if text.may_hold_card():
        for match in _CARD_RUN.finditer(value):
            spans += _card_spans(value, match)
    if text.may_hold_iban():
        for match in _IBAN_RUN.finditer(value):
            spans += _iban_spans(value, match)
    return spans


def text_redacted(value: str, *, prechecks: bool = True) -> str:
    """`value` with the secrets the rules find replaced. Invisible characters (zero-width
    spaces, joiners, soft hyphens) are taken out before matching when the text has any; the
    text keeps them unless a secret was found. A short text's answer is cached: stored values
    repeat (statuses, dates, notes)."""
    if len(value) < 4:
        return value  # the shortest secret written is four characters: "pw=x"
    if prechecks and len(value) <= _CACHED:
        return _short_redacted(value)
    return _redacted_now(value, prechecks)


_CACHED = 256


@functools.lru_cache(maxsize=8192)
def _short_redacted(value: str) -> str:
    return _redacted_now(value, True)


def short_cache_clear() -> None:
    """Forget the short strings' answers (for a benchmark)."""
    _short_redacted.cache_clear()


def _redacted_now(value: str, prechecks: bool) -> str:
    if not value.isascii() and _INVISIBLE.search(value):
        visible = _INVISIBLE.sub("", value)
        spans = _spans(_Text(visible, prechecks=prechecks))
        return _replaced(visible, spans) if spans else value
    spans = _spans(_Text(value, prechecks=prechecks))
    return _replaced(value, spans) if spans else value


@functools.lru_cache(maxsize=4096)
def _key_redacted(key: str) -> str:
    """A key with the secrets in it redacted (a key can be pasted text too). Cached."""
    return text_redacted(key)


def _number_redacted(number: int) -> int | str:
    """A JSON number that is a card number is redacted like one written in text."""
    if number < 10**12:
        return number
    return REDACTED if _card_digits(str(number)) else number


def redacted(value: Any) -> Any:
    """A copy of `value` with secrets replaced by "[redacted]": values under secret-looking keys
    (password, pwd, token, api_key, authorization, card_number, pin, cookie, ...) and
    secret-looking strings and numbers anywhere, keys included (provider keys and tokens,
    private keys, passwords after a key word in several languages, command-line passwords,
    card numbers, IBANs, US social security numbers). docs/operations.md lists the forms."""
    if isinstance(value, str):
        return text_redacted(value)
    if isinstance(value, dict):
        copy = {}
        for key in value:
            item = value[key]
            if isinstance(key, str):
                if item not in (None, "") and is_secret_key(key):
                    item = REDACTED
                key = _key_redacted(key) if len(key) >= 4 else key
            if type(item) is int:
                item = _number_redacted(item)
            elif not (item is None or type(item) is bool):
                item = redacted(item)
            copy[key] = item
        return copy
    if isinstance(value, list):
        return [
            _number_redacted(item)
            if type(item) is int
            else item
            if item is None or type(item) is bool
            else redacted(item)
            for item in value
        ]
    if type(value) is int:
        return _number_redacted(value)
    return value


__all__ = ["REDACTED", "RULES", "is_secret_key", "luhn_valid", "redacted", "text_redacted"]
