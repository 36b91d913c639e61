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
    _ASSIGNMENTS,
    _BEARER,
    _CARD_RUN,
    _LITERAL_PATTERNS,
    _PASSWORDS,
    REDACTED,
    _cards,
    _keyword_spans,
    _lowered,
    _replaced,
    is_secret_key,
    luhn_valid,
    redacted,
)
from tests.secret_corpus import KEY_VALUES, SECRET_KEYS, TEXT_FORMS, leaks


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


def _redacted_text_every_regex(text: str) -> str:
    """What `redacted` does to a string with none of its prechecks: every regex runs."""
    for _, pattern, replacement in _LITERAL_PATTERNS:
        text = pattern.sub(replacement, text)
    spans = _keyword_spans(_lowered(text), _BEARER + _PASSWORDS + _ASSIGNMENTS)
    return _CARD_RUN.sub(_cards, _replaced(text, spans))


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
    assert redacted(text) == _redacted_text_every_regex(text)


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
    from agentops.engine.redaction import _lowered

    longer = [
        code
        for code in range(0x110000)
        if not 0xD800 <= code <= 0xDFFF and len(chr(code).lower()) != 1
    ]

    assert longer == [0x130]
    assert len(_lowered("İstanbul password: x")) == len("İstanbul password: x")
    assert redacted("İSTANBUL PASSWORD: Gizli-42") == "İSTANBUL PASSWORD: [redacted]"


def test_the_card_precheck_knows_every_first_byte_of_a_unicode_digit():
    from agentops.engine.redaction import DIGIT_LEAD_BYTES

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
