"""The secrets people paste, one example of each form the redactor knows, and the secret part of
each: what must not be found anywhere after it went through the product.

`TEXT_FORMS` are written in free text (name: (how it is written, the secret in it)).
`SECRET_KEYS` are key names whose value is a secret whatever it looks like; `KEY_VALUES` holds one
value per key, none of which looks like a secret on its own.
"""

from __future__ import annotations

PRIVATE_KEY_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"
OPENSSH_KEY_BODY = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAAB"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
AWS_SECRET_2 = "je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY"

TEXT_FORMS: dict[str, tuple[str, str]] = {
    # Card numbers (Luhn-valid test numbers), every separator and length.
    "card-spaces": ("card 4111 1111 1111 1111 exp 12/29", "4111 1111 1111 1111"),
    "card-dashes": ("card 5500-0000-0000-0004", "5500-0000-0000-0004"),
    "card-dots": ("card 4012.8888.8888.1881", "4012.8888.8888.1881"),
    "card-plain": ("card 6011111111111117 please", "6011111111111117"),
    "card-amex-grouped": ("amex 3714 496353 98431", "3714 496353 98431"),
    "card-amex-plain": ("amex 378282246310005.", "378282246310005"),
    "card-13-digits": ("old visa 4222222222222", "4222222222222"),
    "card-14-diners": ("diners 3056 930902 5904", "3056 930902 5904"),
    "card-19-digits": ("card 4000 0000 0000 0000 006", "4000 0000 0000 0000 006"),
    "card-after-a-number": ("qty 12 3530 1113 3330 0000", "3530 1113 3330 0000"),
    # Provider keys.
    "stripe-sk-live": (
        "STRIPE=sk_live_51HqLyjWDarjtT1zdp7dc4eC3",
        "sk_live_51HqLyjWDarjtT1zdp7dc4eC3",
    ),
    "stripe-sk-test": ("use sk_test_4eC39HqLyjWDarjtT1zdp7dc", "sk_test_4eC39HqLyjWDarjtT1zdp7dc"),
    "stripe-rk-live": ("restricted rk_live_7Tq2xYv9LmN3pQ8rS1uW", "rk_live_7Tq2xYv9LmN3pQ8rS1uW"),
    "stripe-rk-test": ("(rk_test_Zx81bQ0vN4mK7jH2gF5d)", "rk_test_Zx81bQ0vN4mK7jH2gF5d"),
    "stripe-webhook": (
        "webhook whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    ),
    "openai": ("key sk-proj-4f9Qm2XbT7vLw8RcZ1yN3kPd", "sk-proj-4f9Qm2XbT7vLw8RcZ1yN3kPd"),
    "aws-access-key-id": ("id AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    "aws-secret-after-id": (f"AKIAI44QH8DHBEXAMPLE {AWS_SECRET}", AWS_SECRET),
    "aws-secret-next-line": (
        f"Access key ID,Secret access key\nAKIAJ2EXAMPLEQ7Z4XYZ,\n{AWS_SECRET_2}",
        AWS_SECRET_2,
    ),
    "aws-secret-by-name": (
        "[default]\naws_secret_access_key = Q9xv/EXAMPLEKEY+c3Jf8pLmN2bRt7Yw0aZk5HdUe",
        "Q9xv/EXAMPLEKEY+c3Jf8pLmN2bRt7Yw0aZk5HdUe",
    ),
    "github": (
        "token ghp_16C7e42F292c6912E7710c838347Ae178B4a",
        "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
    ),
    "slack": ("xoxb-2048-1234567890-abcDEFghiJKL", "xoxb-2048-1234567890-abcDEFghiJKL"),
    "jwt": (
        "session eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJlLXNpZw ok",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJlLXNpZw",
    ),
    "bearer": ("Authorization: Bearer tk.9f8e7d6c5b4a3210", "tk.9f8e7d6c5b4a3210"),
    "basic-auth": ("Authorization: Basic dXNlcjpodW50ZXIy", "dXNlcjpodW50ZXIy"),
    "private-key-rsa": (
        f"-----BEGIN RSA PRIVATE KEY-----\n{PRIVATE_KEY_BODY}\n-----END RSA PRIVATE KEY-----",
        PRIVATE_KEY_BODY,
    ),
    "private-key-openssh-cut-off": (
        f"-----BEGIN OPENSSH PRIVATE KEY-----\n{OPENSSH_KEY_BODY}",
        OPENSSH_KEY_BODY,
    ),
    "url-credentials": ("postgres://app:Pg-s3cret-77@db.internal:5432/shop", "Pg-s3cret-77"),
    # Values after key words in free text.
    "password-prose": ("Hi, my password is Tr0ub4dor&3x, thanks.", "Tr0ub4dor&3x"),
    "password-is": ("The password is correct-horse-battery-staple", "correct-horse-battery-staple"),
    "password-colon": ("password: Summer2024!", "Summer2024!"),
    "password-json-text": ('{"user": "ada", "Password": "xK9#mQ2v"}', "xK9#mQ2v"),
    "pw-equals": ("login with pw=hunter22 now", "hunter22"),
    "pwd-colon": ("PWD: 8f3kq-29dx", "8f3kq-29dx"),
    "passwd-env": ("DB_PASSWD=Zz9_pl0m", "Zz9_pl0m"),
    "api-key-equals": (
        "api_key=a8f5f167f44f4964e6c998dee827110c",
        "a8f5f167f44f4964e6c998dee827110c",
    ),
    "x-api-key-header": ("X-Api-Key: 2b7e151628aed2a6abf71588", "2b7e151628aed2a6abf71588"),
    "client-secret": ("client_secret=Qm9hdGxvYWQtb2YtZmlzaA", "Qm9hdGxvYWQtb2YtZmlzaA"),
    "token-in-url": ("https://shop/cb?access_token=ya29.a0AfH6SMC&x=1", "ya29.a0AfH6SMC"),
    "github-token-name": ("GITHUB_TOKEN: gho_shortbutsecret9", "gho_shortbutsecret9"),
    "secret-yaml": ("  secret: 'Zq8 w3 r4nd0m'", "Zq8 w3 r4nd0m"),
}

# Key names whose value is a secret (case, dashes, underscores, prefixes, camelCase).
SECRET_KEYS = [
    "pwd",
    "passwd",
    "password",
    "Password",
    "secret",
    "token",
    "client_secret",
    "private_key",
    "authorization",
    "api_key",
    "API-KEY",
    "x-api-key",
    "github_token",
    "githubToken",
    "AWS_SECRET_ACCESS_KEY",
    "db-password",
    "card_number",
]
# One plain value per key: nothing but the key says it is a secret.
KEY_VALUES = {key: f"plain-{index:02d}-value" for index, key in enumerate(SECRET_KEYS)}


def corpus_size() -> tuple[int, int]:
    """(distinct forms, examples): text forms plus key forms."""
    return len(TEXT_FORMS) + len(SECRET_KEYS), len(TEXT_FORMS) + len(KEY_VALUES)


def secrets() -> dict[str, str]:
    """Every secret of the corpus by name: what must not be found after redaction."""
    found = {name: secret for name, (_, secret) in TEXT_FORMS.items()}
    found.update({f"key:{key}": value for key, value in KEY_VALUES.items()})
    return found


def leaks(text: str) -> list[str]:
    """The names of the corpus's secrets found in `text`."""
    return [name for name, secret in secrets().items() if secret in text]
