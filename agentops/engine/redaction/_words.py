"""The rules that read key words, on the text's lowercased copy: `password: X`, `token=X`,
`Bearer X`, codes after PIN or OTP, passwords in other languages."""

from __future__ import annotations

import re

from agentops.engine.redaction._rule import VALUE_GROUPS, Rule

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


def _word(literal: str, pattern: str, *, boundary: bool = True) -> Rule:
    """A key-word rule on the lowercased copy that starts with `literal` (checked to stand
    alone behind it when `boundary`)."""
    behind = rf"(?<![a-z0-9]{re.escape(literal)})" if boundary else ""
    return Rule(
        re.compile(re.escape(literal) + behind + pattern),
        (literal,),
        VALUE_GROUPS,
        lowered=True,
    )


# What a password is for, between the word and its value: `password for the admin account: X`,
# `Passwort für den Server ist X`.
_FOR = r"[ \t]+(?:for|of|to|für|pour|para|per)[ \t]+[^\n:=\uff1a\"'`]{1,40}?"

# `Bearer <token>` anywhere.
BEARER = [
    Rule(
        re.compile(r"(?P<bare>bearer(?<![a-z0-9_]bearer)[ \t]+[a-z0-9._~+/=-]{8,})"),
        ("bearer",),
        ("bare",),
        lowered=True,
    )
]
# `password: X`, `db_password=X`, `"password": "X"`, `my password is X`, `pw=X`, `pwd: X`,
# `passphrase: X`, `passcode is X`, `Passwort: X`, `--password X`, `DB_PASS=X`, `pass=X`.
PASSWORDS = [
    _word(
        "pass",
        rf"(?:w(?:or)?ds?|wort|phrase|code)(?:{_FOR})?(?:{_SEPARATOR}|{_IS}){_VALUE}",
        boundary=False,
    ),
    _word("pw", rf"d?(?:{_SEPARATOR}|{_IS}){_VALUE}"),
    _word("--pass", rf"(?:word)?[ \t]+{_VALUE}"),
    Rule(
        re.compile(rf"pass(?<=[_.-]pass){_SEPARATOR}{_VALUE}"),
        ("pass",),
        VALUE_GROUPS,
        lowered=True,
    ),
    _word("pass", rf"(?:\\?[\"'])?[ \t]*={_VALUE}"),
]
# Key words with a separator: `client_secret=X`, `secret: X`, `token=X`, `github_token: X`,
# `?access_token=X`, `api_key=X`, `x-api-key: X`, `aws_secret_access_key = X`, `private_key: X`,
# `AccountKey=X`, `Authorization: Basic X`, `auth: X`, `session_id=X`.
ASSIGNMENTS = [
    _word("secret", rf"{_SEPARATOR}{_VALUE}", boundary=False),
    _word("token", rf"{_SEPARATOR}{_VALUE}", boundary=False),
    Rule(
        re.compile(
            r"key(?:(?<=apikey)|(?<=api_key)|(?<=api-key)|(?<=accesskey)|(?<=access_key)|"
            r"(?<=access-key)|(?<=secretkey)|(?<=secret_key)|(?<=secret-key)|(?<=accountkey)|"
            r"(?<=account_key)|(?<=sharedaccesskey)|(?<=privatekey)|(?<=private_key)|"
            rf"(?<=private-key)){_SEPARATOR}{_VALUE}"
        ),
        ("key",),
        VALUE_GROUPS,
        lowered=True,
    ),
    Rule(
        re.compile(
            rf"auth(?:orization)?(?<![a-z0-9]auth)(?<![a-z0-9]authorization){_SEPARATOR}{_VALUE}"
        ),
        ("auth",),
        VALUE_GROUPS,
        lowered=True,
    ),
    Rule(
        re.compile(
            rf"sess(?:ion)?[_-]?(?:id|token|key)(?<![a-z0-9]sess)(?<![a-z0-9]session)"
            rf"{_SEPARATOR}{_VALUE}"
        ),
        ("sess",),
        VALUE_GROUPS,
        lowered=True,
    ),
    # The signature of an Azure shared access signature URL (`?sv=…&sig=…`).
    Rule(
        re.compile(r"sig=(?<=[?&]sig=)(?P<bare>[^\s&\"'`<>#]+)"),
        ("sig=",),
        ("bare",),
        lowered=True,
    ),
    # A cookie header's value, to the end of its line.
    Rule(
        re.compile(
            r"cookies?(?<![a-z0-9]cookie)(?<![a-z0-9]cookies)(?<![a-z0-9]cookies)"
            rf"{_SEPARATOR}(?:(?P<quote>\\?[\"'])(?P<quoted>[^\n]{{1,4000}}?)(?P=quote)"
            r"|(?P<bare>[^\s\"'][^\n\"']*))"
        ),
        ("cookie",),
        VALUE_GROUPS,
        lowered=True,
    ),
]
# Numbers after a key word: `PIN: 4821`, `my pin is 4821`, `OTP 123456`, `verification code:
# 123456`, `CVV 123` (digits only: `pin: true`, `the code is wrong` stay).
CODES = [
    Rule(
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
    Rule(
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


def _foreign(word: str) -> Rule:
    """`word: X` and `word is X` for a word that means password, standing alone (CJK has no
    spaces between words: nothing is checked behind those)."""
    behind = "" if word in _CJK_WORDS else rf"(?<![^\W\d_]{re.escape(word)})"
    return Rule(
        re.compile(rf"{re.escape(word)}{behind}(?:{_SEPARATOR}|{_IS}){_VALUE}"),
        (word,),
        VALUE_GROUPS,
        lowered=True,
    )


FOREIGN_ASCII = [_foreign(word) for word in _WORDS_ASCII]
FOREIGN_OTHER = [_foreign(word) for word in _WORDS_OTHER]

# Values after a key word that are not secrets: prose ("the password is incorrect") and JSON
# literals ("token": null).
NOT_SECRETS = frozenset(
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
