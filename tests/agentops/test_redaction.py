"""The redactor on its own: every secret form of the corpus goes, ordinary data stays, and the
prechecks that keep it fast change no result."""

from __future__ import annotations

import json
import re

import hypothesis
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentops.engine.redaction import (
    REDACTED,
    RULES,
    is_secret_key,
    luhn_valid,
    redacted,
    text_redacted,
)
from tests.secret_corpus import (
    BENIGN_TEXTS,
    BENIGN_VALUES,
    ISSUE_FORMS,
    KEY_VALUES,
    SECRET_KEYS,
    STRUCTURED_FORMS,
    TEXT_FORMS,
    leaks,
    secrets,
)


@pytest.mark.parametrize(("text", "secret"), TEXT_FORMS.values(), ids=TEXT_FORMS.keys())
def test_every_secret_form_of_the_corpus_is_redacted_in_free_text(text, secret):
    clean = redacted(text)

    assert secret not in clean
    assert REDACTED in clean
    assert redacted(clean) == clean


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("card 4111.1111.1111.1111 ok", "card [redacted] ok"),
        ("qty 12 4111 1111 1111 1111", "qty 12 [redacted]"),
        ("my password is hunter2.", "my password is [redacted]."),
        (
            '{"password": "hunter2", "max_tokens": 12}',
            '{"password": "[redacted]", "max_tokens": 12}',
        ),
        ('{\\"password\\": \\"s3cr3t\\"}', '{\\"password\\": \\"[redacted]\\"}'),
        ("Authorization: Basic dXNlcjpwYXNz", "Authorization: Basic [redacted]"),
        ("?access_token=abc123&page=2", "?access_token=[redacted]&page=2"),
        (
            "AKIAIOSFODNN7EXAMPLE, wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "[redacted], [redacted]",
        ),
        ("redis://:r3d1s-pw@cache:6379/0", "redis://:[redacted]@cache:6379/0"),
    ],
)
def test_only_the_secret_is_replaced_and_the_text_around_it_stays(text, expected):
    assert redacted(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "order ORD-2024-000123-4567 shipped",
        "order 4111111111111112 (fails the Luhn check)",
        "ref 1234567890123, 13 digits that fail the Luhn check",
        "created 1733068800122 ms after the epoch",  # passes Luhn; no card starts with 1
        "2024-01-15T10:30:00Z, 2024-01-15 10:30:00.123456, 15.01.2024",
        "dates 2024-01-15 2024-02-20 2024-03-05 2024-04-10",
        "total 12345.6789012345 and pi 3.4111111111111111",
        "hosts 192.168.100.200 10.0.0.1, version 4.1.1.1111.1111",
        "+1 555 123 4567, +44 20 7946 0958",
        "id 550e8400-e29b-41d4-a716-446655440000",
        "commit 3f786850e387550fdab836ed7e6dc881de23001b",
        "Each token costs money; the token is valid; tokens: 1200",
        "The password is incorrect. Password is too short. Reset your password here.",
        '{"token": null, "password_policy": "long", "max_tokens": 12, "token_type": "bearer"}',
        "the author: Ada; oauth: enabled; monkey=3",
        "skip sk_live (no key follows) and sk-short",
        "eyJ is how base64 starts a JSON object",
        "bearer of bad news",
    ],
)
def test_ordinary_data_is_left_as_it_is(text):
    assert redacted(text) == text


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_the_value_under_a_secret_key_is_redacted_whatever_it_is(key):
    assert redacted({key: KEY_VALUES[key], "nested": [{key: 12}]}) == {
        key: REDACTED,
        "nested": [{key: REDACTED}],
    }


@pytest.mark.parametrize(
    "key",
    [
        "prompt_tokens",
        "maxTokens",
        "token_count",
        "password_policy",
        "secret_name",
        "keyboard",
        "passport",
        "monkey",
        "company",
        "span",
    ],
)
def test_keys_that_only_contain_a_secret_word_keep_their_value(key):
    assert not is_secret_key(key)
    assert redacted({key: "ACME 12"}) == {key: "ACME 12"}


def test_empty_and_null_secrets_stay_so_that_a_missing_value_reads_as_missing():
    assert redacted({"password": "", "token": None}) == {"password": "", "token": None}


def test_card_numbers_are_redacted_only_when_they_pass_the_luhn_check():
    text = "card 4111 1111 1111 1111, 5500-0000-0000-0004; order 4111111111111112 ref 1234567890123"
    assert redacted(text) == (
        "card [redacted], [redacted]; order 4111111111111112 ref 1234567890123"
    )
    assert luhn_valid("4111111111111111") and not luhn_valid("4111111111111112")
    assert redacted({"card_number": "x", "cvv": "123", "company": "ACME"}) == {
        "card_number": "[redacted]",
        "cvv": "[redacted]",
        "company": "ACME",
    }


def test_a_card_is_groups_of_three_digits_or_more_and_dots_are_not_mixed():
    assert redacted("4111 1111-1111 1111") == "[redacted]"
    assert redacted("4111.1111 1111.1111") == "4111.1111 1111.1111"
    assert redacted("4111.1111111111111") == "4111.1111111111111"  # a decimal
    assert redacted("on 2024-01-15 4111111") == "on 2024-01-15 4111111"
    assert redacted("4 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1") == "4 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1"


# Secrets, near misses and the characters the prechecks look for, to be strung together.
_SECRET_PIECES = [
    *(text for text, _ in TEXT_FORMS.values()),
    "sk-",
    "AKIA",
    "ghp_",
    "xoxb-",
    "whsec_",
    "eyJ",
    "-----BEGIN RSA PRIVATE KEY-----",
    "-----END RSA PRIVATE KEY-----",
    "Bearer ",
    "BEARER\t",
    "bEaReR ",
    "acdefgh.ijk~",
    "password",
    "PassWord is ",
    "pw",
    "token",
    "=",
    ":",
    '"',
    "\\",
    "&a=",
    "://",
    "@",
    "4111-1111-1111-1112",
    "5500000000000004",
    "0",
    "7",
    ".",
    " ",
    "-",
    "_",
    "K",
    "J",
    "w",
    "W",
    "b",
    "B",
    "x",
    "é",
    "İ",
    "٣",
    # 4111 1111 1111 1111 in Arabic-Indic digits, and in fullwidth digits.
    "".join(chr(0x0660 + int(c)) if c.isdigit() else c for c in "4111 1111 1111 1111"),
    "".join(chr(0xFF10 + int(c)) for c in "4111111111111111"),
    "订单",
    "\n",
    # What the newer rules start from or look for.
    "github_pat_",
    "glpat-",
    "AIza",
    "SG.",
    "AC",
    "SK",
    "AccountKey=",
    "hooks.slack.com/services/T0/B0/x",
    "curl -u ",
    ":",
    "mysql -p",
    "_PASS=",
    "DB_",
    "export ",
    ":5432:",
    "*:",
    "MII",
    "IBA",
    "b3BlbnNzaC1rZXktdjE",
    "密码：",  # noqa: RUF001
    "Passwort ",
    "mot de passe est ",
    "пароль — ",
    "PIN ",
    "otp: ",
    "Cookie: ",
    "session_id=",
    "SSN ",
    "123-45-6789",
    "DE89 3704 0044 0532 0130 00",
    "GB82",
    "/",
    "  ",
    "\u200b",
    "\u00a0",
]
storable = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")


@hypothesis.settings(max_examples=400)
@hypothesis.example("Authorization: Bearer acdefgh.ijk~ and BEARER\tACDEFGH.IJK")
@hypothesis.example("İ password: hunter2 İ")
@hypothesis.example("card 4111 1111 1111 1111, order 4111-1111-1111-1112")
@given(
    st.lists(st.one_of(st.sampled_from(_SECRET_PIECES), st.text(storable, max_size=8))).map("".join)
)
def test_redacted_text_is_what_running_every_regex_gives(text):
    # Past 256 characters the literals are found otherwise (their characters, then each one).
    longer = f"{text}\n{'filler ' * 40}{text}"

    assert redacted(text) == text_redacted(text, prechecks=False)
    assert redacted(longer) == text_redacted(longer, prechecks=False)


@pytest.mark.parametrize(
    "text",
    [*(text for text, _ in TEXT_FORMS.values()), *BENIGN_TEXTS.values()],
)
def test_a_long_text_searches_literals_one_by_one_and_finds_the_same(text):
    # A text this long finds the literals by their characters, then each one.
    long = f"{'ordinary words, nothing here. ' * 150}\n{text}\n{'and more words. ' * 20}"

    assert len(long) > 4096
    assert redacted(long) == text_redacted(long, prechecks=False)
    assert redacted(long).startswith("ordinary words")


# Random text around a secret: anything storable, set apart from the secret by a space or a
# line break (a letter glued to a key is another word: "xsk-…" is not a key).
_around = st.text(storable, max_size=40)
_apart = st.sampled_from([" ", "\n", " \n", "\t"])


@st.composite
def _texts_with_a_secret(draw):
    text, _ = draw(st.sampled_from(list(TEXT_FORMS.values())))
    return draw(_around) + draw(_apart) + text + draw(_apart) + draw(_around)


_plain_keys = st.text(st.characters(categories=("Ll", "Nd")), min_size=1, max_size=6).filter(
    lambda key: not is_secret_key(key)
)
_json_with_secrets = st.recursive(
    _texts_with_a_secret() | st.integers() | st.none() | _around,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(_plain_keys | st.sampled_from(SECRET_KEYS), children, max_size=4)
    ),
    max_leaves=12,
)


@hypothesis.settings(max_examples=300)
@given(_texts_with_a_secret())
def test_a_secret_anywhere_in_random_text_is_redacted(text):
    assert leaks(redacted(text)) == []


@hypothesis.settings(max_examples=200)
@given(_json_with_secrets, st.sampled_from(SECRET_KEYS))
def test_no_secret_survives_in_random_nested_json(value, key):
    value = {"data": value, key: KEY_VALUES[key]}

    stored = json.dumps(redacted(value), ensure_ascii=False)

    assert leaks(stored) == []


def test_the_lowercased_copy_keeps_every_position():
    from agentops.engine.redaction._text import _lowered

    longer = [
        code
        for code in range(0x110000)
        if not 0xD800 <= code <= 0xDFFF and len(chr(code).lower()) != 1
    ]

    assert longer == [0x130]
    assert len(_lowered("İstanbul password: x")) == len("İstanbul password: x")
    assert redacted("İSTANBUL PASSWORD: Gizli-42") == "İSTANBUL PASSWORD: [redacted]"


def test_the_card_precheck_knows_every_first_byte_of_a_unicode_digit():
    from agentops.engine.redaction._numbers import DIGIT_LEAD_BYTES

    digit = re.compile(r"\d")
    leads = {
        chr(code).encode()[0]
        for code in range(0x80, 0x110000)
        if not 0xD800 <= code <= 0xDFFF and digit.match(chr(code))
    }

    assert leads == DIGIT_LEAD_BYTES


def test_a_card_in_other_digits_is_redacted_in_accented_text():
    arabic = "".join(chr(0x0660 + int(c)) if c.isdigit() else c for c in "4111 1111 1111 1111")
    fullwidth = "".join(chr(0xFF10 + int(c)) for c in "4111111111111111")

    assert redacted(f"Café n° 12, carte {arabic}.") == "Café n° 12, carte [redacted]."
    assert redacted(f"注文 {fullwidth}") == "注文 [redacted]"
    assert redacted("Café n° 12, commande 4111-1111-1111-1112") == (
        "Café n° 12, commande 4111-1111-1111-1112"
    )


# --- Issue #39: the forms people paste, the values that must stay -------------------------------


@pytest.mark.parametrize(("name", "value"), BENIGN_TEXTS.items(), ids=BENIGN_TEXTS.keys())
def test_ordinary_text_of_the_benign_corpus_comes_through_unchanged(name, value):
    assert redacted(value) == value


@pytest.mark.parametrize(("name", "value"), BENIGN_VALUES.items(), ids=BENIGN_VALUES.keys())
def test_ordinary_structured_values_of_the_benign_corpus_come_through_unchanged(name, value):
    assert redacted(value) == value


@pytest.mark.parametrize(
    ("value", "secret"), STRUCTURED_FORMS.values(), ids=STRUCTURED_FORMS.keys()
)
def test_secrets_only_a_structured_value_holds_are_redacted(value, secret):
    stored = json.dumps(redacted(value), ensure_ascii=False)

    assert secret not in stored
    assert REDACTED in stored


def test_every_form_of_the_issue_is_redacted_in_text_and_in_structure():
    values = {name: text for name, (text, _) in TEXT_FORMS.items()}
    values.update({f"key:{key}": {key: value} for key, value in KEY_VALUES.items()})
    values.update({name: value for name, (value, _) in STRUCTURED_FORMS.items()})
    everything = secrets()

    leaked = {
        form: names
        for form, entries in ISSUE_FORMS.items()
        if (
            names := [
                name
                for name in entries
                if everything[name] in json.dumps(redacted(values[name]), ensure_ascii=False)
                or everything[name]
                in json.dumps(redacted({"said": values[name]}), ensure_ascii=False)
            ]
        )
    }

    assert len(ISSUE_FORMS) == 31
    assert leaked == {}


def test_a_card_held_as_a_json_number_is_redacted_and_other_numbers_stay():
    assert redacted({"card": 4111111111111111, "n": [5500000000000004, 12]}) == {
        "card": REDACTED,
        "n": [REDACTED, 12],
    }
    assert redacted(4111111111111111) == REDACTED
    # Luhn fails; no card starts with 1 or 9; too short; too long.
    kept = [4111111111111112, 1733068800122, 9111111111111111, 411111111111, 41111111111111111118]
    assert redacted(kept) == kept


@pytest.mark.parametrize(
    "key",
    ["passcode", "pin", "PIN", "pinCode", "otp", "cookie", "Set-Cookie", "session_id", "sessionId",
     "JSESSIONID", "auth", "x-auth", "passwords", "DB_PASS", "smtp.pass", "ssn", "iban", "cvv2",
     "account_key", "signing-key"],
)  # fmt: skip
def test_issue_39s_key_names_hold_secrets(key):
    assert is_secret_key(key)
    assert redacted({key: 1234}) == {key: REDACTED}


@pytest.mark.parametrize(
    "key",
    ["max_tokens", "pinned", "spin", "author", "session_count", "pass", "passed", "bypass",
     "cookie_consent", "otp_enabled", "pin_count", "sessions", "authored_by", "keyboard",
     "passenger", "spinner", "oauth"],
)  # fmt: skip
def test_keys_that_only_look_like_issue_39s_keep_their_value(key):
    assert not is_secret_key(key)
    assert redacted({key: 12}) == {key: 12}


def test_a_secret_in_a_key_is_redacted_in_the_key():
    assert redacted(
        {"password=hunter22": True, "plain": {"ghp_16C7e42F292c6912E7710c838347Ae178B4a": 1}}
    ) == {
        "password=[redacted]": True,
        "plain": {REDACTED: 1},
    }


def test_invisible_characters_do_not_hide_a_secret_and_stay_in_ordinary_text():
    hidden = "key sk_live_51Hq\u200bLyjWDarjtT1zdp7dc4eC3 and pass\u200dword: Zw-31"
    family = "family \U0001f468\u200d\U0001f469\u200d\U0001f467, soft\u00adhyphen, \ufeffBOM"

    assert redacted(hidden) == "key [redacted] and password: [redacted]"
    assert redacted(family) == family


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("SSN 123-45-6789", "SSN [redacted]"),
        ("ssn: 123456789; dob 1990-01-01", "ssn: [redacted]; dob 1990-01-01"),
        ("SSNs 123-45-6789 and 234-56-7890", "SSNs [redacted] and [redacted]"),
        # No context on its line, an invalid area, part of a longer number: kept.
        ("ticket 123-45-6789", "ticket 123-45-6789"),
        ("SSN below\n123-45-6789", "SSN below\n123-45-6789"),
        ("SSN 666-45-6789, 000-12-3456, 123-00-4567", "SSN 666-45-6789, 000-12-3456, 123-00-4567"),
        ("SSN 123-45-67890", "SSN 123-45-67890"),
        ("classnames 123-45-6789", "classnames 123-45-6789"),
    ],
)
def test_a_social_security_number_needs_the_word_on_its_line_and_a_valid_number(text, expected):
    assert redacted(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("IBAN DE89 3704 0044 0532 0130 00 BIC", "IBAN [redacted] BIC"),
        ("to DE89370400440532013000.", "to [redacted]."),
        ("DE89 3704 0044 0532 0130 00 1234", "[redacted] 1234"),
        ("DE89 3704 0044 0532 0130 01", "DE89 3704 0044 0532 0130 01"),
        ("XX89 3704 0044 0532 0130 00", "XX89 3704 0044 0532 0130 00"),
    ],
)
def test_an_iban_is_redacted_when_its_checksum_and_format_hold(text, expected):
    assert redacted(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4111/1111/1111/1111", "[redacted]"),
        ("4111  1111  1111  1111", "[redacted]"),
        ("4111/1111 1111/1111", "4111/1111 1111/1111"),  # slashes not mixed with spaces
        ("01/15/2024 4111", "01/15/2024 4111"),
        ("/orders/4111/1111/1111/1112", "/orders/4111/1111/1111/1112"),  # Luhn fails
        ("uuid 7c18bb6b-d60b-4797-0070-52878d941323", "uuid 7c18bb6b-d60b-4797-0070-52878d941323"),
    ],
)
def test_cards_with_slashes_or_double_spaces(text, expected):
    assert redacted(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("curl -u bob:s3cret https://x", "curl -u bob:[redacted] https://x"),
        ("curl -ubob:s3cret https://x", "curl -ubob:[redacted] https://x"),
        ("curl --user=bob:s3cret https://x", "curl --user=bob:[redacted] https://x"),
        ("docker run -u 1000:1000 img", "docker run -u 1000:1000 img"),
        ("mysql -u app -pS3cret -P 3306 shop", "mysql -u app -p[redacted] -P 3306 shop"),
        ("mysql -u app -p shop", "mysql -u app -p shop"),
        ("ssh -p2222 host -pX", "ssh -p2222 host -pX"),  # no MySQL client on the line
        ("redis-cli -h cache -a R3d1s! ping", "redis-cli -h cache -a [redacted] ping"),
        ("DB_PASS=x1\nexport API_TOKEN='t 2'", "DB_PASS=[redacted]\nexport API_TOKEN='[redacted]'"),
        ("say DB_PASS=x1 inline", "say DB_PASS=[redacted] inline"),
        ("SORT_KEY_NAME=created\nDEBUG=true", "SORT_KEY_NAME=created\nDEBUG=true"),
        ("db:5432:shop:app:p\\:w", "db:5432:shop:app:[redacted]"),
        ("10:30:00:12:45", "10:30:00:12:45"),
        ("db:5432:shop:app:abc:extra", "db:5432:shop:app:abc:extra"),
    ],
)
def test_command_lines_env_and_pgpass_lines(text, expected):
    assert redacted(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7xx\nAbCdEfGhIjKlMnOpQrStUvWx\nok",
         "[redacted]\nok"),
        # A public key and a certificate are no secret.
        ("MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAu1SU1LfVLPHCozMxH2Mo",
         "MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAu1SU1LfVLPHCozMxH2Mo"),
        ("MIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0BAQUFADBaMQswCQYDVQQGEwJJ",
         "MIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0BAQUFADBaMQswCQYDVQQGEwJJ"),
    ],
)  # fmt: skip
def test_a_private_key_body_without_its_begin_line_and_public_ones_kept(text, expected):
    assert redacted(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("密码：Kx82!mQz，请保存", "密码：[redacted]，请保存"),  # noqa: RUF001
        ("パスワードは Abc123 です", "パスワードは [redacted] です"),
        ("Kennwort = Sommer99", "Kennwort = [redacted]"),
        ("mot de passe\u202f: Soleil#42", "mot de passe\u202f: [redacted]"),
        ("senha: Praia2024", "senha: [redacted]"),
        ("Das Passwort ist falsch.", "Das Passwort ist falsch."),  # "wrong", as in English
        ("Passwortrichtlinie: lang", "Passwortrichtlinie: lang"),
        ("密码学：一门课", "密码学：一门课"),  # noqa: RUF001
    ],
)
def test_passwords_in_other_languages(text, expected):
    assert redacted(text) == expected


def test_every_rule_needs_a_literal_the_prechecks_search_for():
    assert all(rule.needs for rule in RULES)


def test_a_key_is_read_without_invisible_characters_and_in_its_compatibility_form():
    fullwidth = "".join(chr(0xFF41 + ord(c) - ord("a")) for c in "password")

    assert redacted({"pass\u200bword": "x", fullwidth: "y", "auth\u200bor": "Ada"}) == {
        "pass\u200bword": REDACTED,
        fullwidth: REDACTED,
        "auth\u200bor": "Ada",
    }
