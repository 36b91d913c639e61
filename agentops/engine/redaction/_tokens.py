"""The case-sensitive rules: provider keys and tokens (detect-secrets' plugins first, then the
forms they miss), private keys, command lines, `.env` and `.pgpass` lines."""

from __future__ import annotations

import re
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

from agentops.engine.redaction._rule import QUOTED_OR_BARE, VALUE_GROUPS, Rule


def _library(
    plugin: Any,
    index: int,
    needs: tuple[str, ...],
    *,
    groups: tuple[int | str, ...] = (),
    lowered: bool = False,
    per_line: bool = False,
) -> Rule:
    """A rule with one of a detect-secrets plugin's own patterns (`denylist[index]`)."""
    pattern = list(plugin.denylist)[index]
    return Rule(pattern, needs, groups, lowered=lowered, per_line=per_line)


def _jwt_valid(match: re.Match[str], token: str) -> bool:
    return JwtTokenDetector.is_formally_valid(token)


# detect-secrets 1.5.0's plugins, each pattern with what it needs. Left out: the high-entropy
# plugins (they take git SHAs, UUIDs and base64 images), the keyword detector (see the key-word
# rules below), the private key detector (it finds the BEGIN line only: `PRIVATE_KEYS` takes the
# whole block), IP addresses (no secret), Artifactory (its `AP…` password form takes upper-case
# words), Discord and Telegram (no literal to gate on: 5-11 ms per 500 KB), Cloudant, IBM and
# SoftLayer (their key-word prefixes "cl", "sl", "cos" occur in most text; the key-word rules
# take their `password=` forms).
LIBRARY_RULES = [
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
    Rule(next(iter(JwtTokenDetector.denylist)), ("eyJ",), valid=_jwt_valid),
]


# Case-sensitive rules written here: forms no library covers, or covers only at one exact length
# (a key cut short or wrapped is still a key). Literal first and the word boundary checked behind
# it: the regex engine then jumps from one occurrence of the literal to the next instead of trying
# every position (a leading \b costs ~9 ms per pattern on a 500 KB string, this ~0.13 ms).
_AWS_ACCESS_KEY_ID = r"AKIA(?<![A-Za-z0-9]AKIA)[0-9A-Z]{16}(?![0-9A-Za-z])"
_AWS_SECRET = r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"
_BASE64 = "A-Za-z0-9+/"
TOKEN_RULES = [
    # An AWS access key id, and the 40-character secret key written after it (same line or the
    # next, as the console's CSV and people's messages have them).
    Rule(
        re.compile(rf"(?P<id>{_AWS_ACCESS_KEY_ID})(?:[\s\S]{{0,100}}?(?P<secret>{_AWS_SECRET}))?"),
        ("AKIA",),
        ("id", "secret"),
    ),
    # OpenAI-style keys (`sk-proj-…`, `sk-ant-…`).
    Rule(re.compile(r"sk-(?<![A-Za-z0-9]sk-)[A-Za-z0-9_-]{16,}"), ("sk-",)),
    # Stripe secret and restricted keys, webhook signing secrets.
    Rule(
        re.compile(r"k_(?:live|test)_(?<![A-Za-z0-9][rs]k_[a-z]{4}_)(?<=[rs]k_[a-z]{4}_)\w{10,}"),
        ("k_live_", "k_test_"),
    ),
    Rule(re.compile(r"whsec_(?<![A-Za-z0-9]whsec_)[A-Za-z0-9+/=]{10,}"), ("whsec_",)),
    # GitHub: classic tokens at any length, fine-grained `github_pat_…`.
    Rule(re.compile(r"gh[pousr]_(?<![A-Za-z0-9]gh[pousr]_)[A-Za-z0-9]{20,}"), ("gh",)),
    Rule(re.compile(r"github_pat_(?<![A-Za-z0-9]github_pat_)\w{20,}"), ("github_pat_",)),
    # GitLab personal, deploy, runner and other tokens at any length.
    Rule(
        re.compile(
            r"gl(?<![A-Za-z0-9]gl)(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent|oas|sa)-[\w-]{16,}"
        ),
        ("gl",),
    ),
    # Slack tokens.
    Rule(
        re.compile(r"xox[abeoprs]-(?<![A-Za-z0-9]xox[abeoprs]-)[A-Za-z0-9-]{10,}"),
        ("xox",),
    ),
    Rule(re.compile(r"xapp-(?<![A-Za-z0-9]xapp-)[A-Za-z0-9-]{10,}"), ("xapp-",)),
    # Google API keys and OAuth access tokens and client secrets.
    Rule(re.compile(r"AIza(?<![A-Za-z0-9_-]AIza)[\w-]{30,}"), ("AIza",)),
    Rule(re.compile(r"ya29\.(?<![\w-]ya29\.)[\w-]{16,}"), ("ya29.",)),
    Rule(re.compile(r"GOCSPX-(?<![\w-]GOCSPX-)[\w-]{16,}"), ("GOCSPX-",)),
    # SendGrid keys at any length.
    Rule(re.compile(r"SG\.(?<![\w.]SG\.)[\w-]{16,}\.[\w-]{16,}"), ("SG.",)),
    # Twilio API key and account SIDs (32 hexadecimal digits), upper or lower case.
    Rule(
        re.compile(r"(?:SK|AC)(?<![A-Za-z0-9]SK)(?<![A-Za-z0-9]AC)[0-9a-fA-F]{32}(?![\w])"),
        ("SK", "AC"),
    ),
    # npm, Hugging Face, Shopify, DigitalOcean tokens; age secret keys.
    Rule(re.compile(r"npm_(?<![A-Za-z0-9]npm_)[A-Za-z0-9]{30,}"), ("npm_",)),
    Rule(re.compile(r"hf_(?<![A-Za-z0-9]hf_)[A-Za-z0-9]{30,}"), ("hf_",)),
    Rule(
        re.compile(r"shp(?:at|ca|pa|ss)_(?<![A-Za-z0-9]shp\w\w_)[a-fA-F0-9]{32}"),
        ("shp",),
    ),
    Rule(re.compile(r"do[por]_v1_(?<![A-Za-z0-9]do\w_v1_)[a-f0-9]{64}"), ("_v1_",)),
    Rule(re.compile(r"AGE-SECRET-KEY-1[0-9A-Z]{50,}"), ("AGE-SECRET-KEY-1",)),
    # Webhook URLs whose path is the secret: Slack (any scheme, workflows and triggers too),
    # Discord, Microsoft Teams.
    Rule(
        re.compile(r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<path>[\w/+-]{16,})"),
        ("hooks.slack.com/",),
        ("path",),
    ),
    Rule(
        re.compile(r"/api/webhooks/(?P<path>\d+/[\w-]{20,})"),
        ("/api/webhooks/",),
        ("path",),
    ),
    Rule(
        re.compile(r"\.webhook\.office\.com/webhookb2/(?P<path>[\w@/-]{20,})"),
        (".webhook.office.com/",),
        ("path",),
    ),
    # JWTs: three base64url segments, the first a JSON header ("eyJ" is `{"` encoded).
    Rule(
        re.compile(r"eyJ(?<![A-Za-z0-9_-]eyJ)[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*"),
        ("eyJ",),
    ),
    # The password of a URL's credentials (postgres://user:password@host).
    Rule(re.compile(r"://[^\s/?#@:]*:(?P<pw>[^\s/?#@]+)@"), ("://",), ("pw",)),
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
PRIVATE_KEYS = [
    Rule(
        re.compile(
            r"-----BEGIN [A-Z ]*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
            r"(?:-----END [A-Z ]*PRIVATE KEY(?: BLOCK)?-----|\Z)"
        ),
        ("-----BEGIN ",),
    ),
    Rule(
        re.compile(
            rf"M(?<![{_BASE64}]M)(?:II[{_BASE64}]{{3}}IBA|IG[{_BASE64}]AgE|"
            rf"[{_BASE64}][AEIMQUYcgkosw048]CAQ|II[{_BASE64}]{{5,8}}BgkqhkiG9w0BBQ)"
            rf"[{_BASE64}]{{24,}}{_BODY_LINES}"
        ),
        ("MII", "MIG", "CAQ"),
    ),
    Rule(
        re.compile(rf"b3BlbnNzaC1rZXktdjE(?<![{_BASE64}]b3BlbnNzaC1rZXktdjE){_BODY_LINES}"),
        ("b3BlbnNzaC1rZXktdjE",),
    ),
    Rule(
        re.compile(rf"Private-Lines: \d+\r?\n(?P<body>{_BODY_LINES})"),
        ("Private-Lines:",),
        ("body",),
    ),
]

# Command lines: `curl -u user:password` (`--user`, quoted or not; a numeric `uid:gid` such as
# docker's `-u 1000:1000` is no password), `mysql -pPASSWORD` (the password glued to -p, on a
# MySQL or MariaDB client's line; `-p` alone prompts, `-P` is the port), `sshpass -p PASSWORD`,
# `redis-cli -a PASSWORD`.
COMMAND_RULES = [
    Rule(
        re.compile(
            r"-(?<![\w-]-)(?:u|-user)(?:[ \t]+|=)?"
            r"(?:(?P<quote>[\"'])(?P<user1>[^:\n\"']*):(?P<quoted>[^\n]*?)(?P=quote)"
            r"|(?P<user2>[^\s:\"'`]+):(?P<bare>[^\s\"'`]+))"
        ),
        ("-u",),
        VALUE_GROUPS,
        valid=lambda match, password: not password.isdigit(),
    ),
    Rule(
        re.compile(
            r"(?:mysql|mariadb)(?<![\w-]mysql)(?<![\w-]mariadb)[\w-]*[ \t][^\n]*?"
            rf"(?<=[ \t])-p{QUOTED_OR_BARE}"
        ),
        ("mysql", "mariadb"),
        VALUE_GROUPS,
    ),
    Rule(
        re.compile(rf"sshpass[ \t]+-p[ \t]*{QUOTED_OR_BARE}"),
        ("sshpass",),
        VALUE_GROUPS,
    ),
    Rule(
        re.compile(rf"redis-cli[^\n]*?[ \t]-a[ \t]+{QUOTED_OR_BARE}"),
        ("redis-cli",),
        VALUE_GROUPS,
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


LINE_RULES = [
    Rule(
        re.compile(rf"_(?<=[A-Z0-9]_){_ENV_WORDS}(?:_BASE)?[ \t]*=[ \t]*{QUOTED_OR_BARE}"),
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
        VALUE_GROUPS,
        valid=_env_line,
    ),
    Rule(
        re.compile(rf":(?:\d{{1,5}}|\*):{_FIELD}:{_FIELD}:(?P<pw>{_FIELD})(?![^\s\"'`,;])"),
        (":",),
        ("pw",),
        valid=_pgpass_line,
    ),
]
