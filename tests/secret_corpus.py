"""The secrets people paste, examples of each form the redactor knows, and the secret part of
each: what must not be found anywhere after it went through the product; and the ordinary values
that must come through it unchanged.

`TEXT_FORMS` are written in free text (name: (how it is written, the secret in it)).
`SECRET_KEYS` are key names whose value is a secret whatever it looks like; `KEY_VALUES` holds one
value per key, none of which looks like a secret on its own. `STRUCTURED_FORMS` are secrets only
a structured value holds (a card number as a JSON number, a secret as a key). `ISSUE_FORMS` maps
each form issue #39 found stored raw to the corpus entries that show it. `BENIGN_TEXTS` and
`BENIGN_VALUES` must pass through `redacted` unchanged: tools receive what it leaves.
"""

from __future__ import annotations

import base64
import hashlib

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
    # Forms issue #39 found stored raw. Provider keys and tokens (made-up values of the real
    # shapes; more than one length where people trim or a provider changed its length).
    "github-fine-grained": (
        "GITHUB=github_pat_11AB2CDEF0gHiJkLmNoPqR_sTuVwXyZ0123456789abcdefGHIJKLMNOPqrstuv12",
        "github_pat_11AB2CDEF0gHiJkLmNoPqR_sTuVwXyZ0123456789abcdefGHIJKLMNOPqrstuv12",
    ),
    "github-fine-grained-short": (
        "clone with github_pat_11ABCDEFG0aBcDeFgHiJkLmN please",
        "github_pat_11ABCDEFG0aBcDeFgHiJkLmN",
    ),
    "gitlab-pat": ("glpat-xY9zA1bC2dE3fG4hI5jK push", "glpat-xY9zA1bC2dE3fG4hI5jK"),
    "gitlab-pat-new": (
        "CI token glpat-Zt8qW2xV5nB7mK3pL9rS4dF6.01.1a0b2c3d4 expires",
        "glpat-Zt8qW2xV5nB7mK3pL9rS4dF6",
    ),
    "google-api-key": (
        "maps key AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW ok",
        "AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW",
    ),
    "slack-webhook": (
        "post to https://hooks.slack.com/services/T024BE7LD/B01ABCDEF9G/nXk2Lp9QzR7tVw3YmB8cDe4F",
        "hooks.slack.com/services/T024BE7LD/B01ABCDEF9G/nXk2Lp9QzR7tVw3YmB8cDe4F",
    ),
    "slack-webhook-no-scheme": (
        "hook: hooks.slack.com/services/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",
        "Qw9Er8Ty7Ui6Op5As4Df3Gh2",
    ),
    "slack-workflow": (
        "https://hooks.slack.com/workflows/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",
        "Zx1Cv2Bn3Mm4Lk5Jh6Gf7Dd8",
    ),
    "discord-webhook": (
        "https://discord.com/api/webhooks/112233445566778899/Tq9Wv8Xu7Ys6Zr5Ap4Bo3Cn2Dm1El0Fk-_9Gj8Hi7",
        "Tq9Wv8Xu7Ys6Zr5Ap4Bo3Cn2Dm1El0Fk-_9Gj8Hi7",
    ),
    "azure-sas": (
        "https://acct.blob.core.windows.net/c/f.txt?sv=2022-11-02&sp=r&sig=Qk7%2Bv9Lm2Xp4Zt8Rw1%3D",
        "Qk7%2Bv9Lm2Xp4Zt8Rw1%3D",
    ),
    "azure-account-key": (
        "DefaultEndpointsProtocol=https;AccountName=shopdata;AccountKey=Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5"
        "MGFiY2RlZmdoaWprbG1ub3BxcnN0dXZ3eHl6QUJDREVGR0hJSktMTU5PUFFSUw==;EndpointSuffix=core."
        "windows.net",
        "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZmdoaWprbG1ub3BxcnN0dXZ3eHl6QUJDREVGR0hJSktMTU5PUFFSUw",
    ),
    "azure-account-key-short": (
        "AccountName=dev;AccountKey=c2hvcnRlci1rZXktZm9yLXRlc3Rz+/Ab==;",
        "c2hvcnRlci1rZXktZm9yLXRlc3Rz",
    ),
    "sendgrid": (
        "SENDGRID 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",
        "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",
    ),
    "sendgrid-short": (
        "key SG.aB3dE5fG7hI9jK1lM.nO2pQ4rS6tU8vW0xY2zA",
        "SG.aB3dE5fG7hI9jK1lM.nO2pQ4rS6tU8vW0xY2zA",
    ),
    "twilio-api-key": (
        "twilio SK2f8e9c1d3b4a5f6e7d8c9b0a1f2e3d4c",
        "SK2f8e9c1d3b4a5f6e7d8c9b0a1f2e3d4c",
    ),
    "twilio-account-sid": (
        "account AC1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d",
        "AC1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d",
    ),
    "twilio-auth-token-env": (
        "TWILIO_AUTH_TOKEN=7c9e2f4a1b3d5e8f0a2c4e6b8d0f1a3c",
        "7c9e2f4a1b3d5e8f0a2c4e6b8d0f1a3c",
    ),
    "twilio-curl": (
        "curl -X POST https://api.twilio.com/x"
        " -u AC9f8e7d6c5b4a39281706f5e4d3c2b1a0:e5d4c3b2a1f0e9d8c7b6a5f4e3d2c1b0",
        "e5d4c3b2a1f0e9d8c7b6a5f4e3d2c1b0",
    ),
    # Configuration and command lines.
    "env-db-pass": ("DB_PASS=Mx7!qLp2z", "Mx7!qLp2z"),
    "env-db-pass-lines": ("DB_HOST=db\nDB_PASS=Qa9_wErT5\nDB_PORT=5432", "Qa9_wErT5"),
    "env-foo-secret": ("FOO_SECRET=b7Gk29xLmQ", "b7Gk29xLmQ"),
    "env-export-key": ('export ENCRYPTION_KEY="k3y-M4t3r1al-99"', "k3y-M4t3r1al-99"),
    "env-smtp-password": ("SMTP_PASSWORD='Zeta 42 Omega'", "Zeta 42 Omega"),
    "env-secret-key-base": ("SECRET_KEY_BASE=4f1d9c2e7b3a8f60", "4f1d9c2e7b3a8f60"),
    "password-for": ("The password for the admin account: Adm1n-Pw-5", "Adm1n-Pw-5"),
    "pin-code": ("PIN-Code: 58301946", "58301946"),
    "curl-u": ("curl -u admin:Hunter2Pw! https://api.example.com/v1", "Hunter2Pw!"),
    "curl-user-quoted": ("curl --user 'deploy:S3cr3t pass' https://x", "S3cr3t pass"),
    "mysql-p": ("mysql -h db -u root -pR00tPw9 shop", "R00tPw9"),
    "mysqldump-p-quoted": ("mysqldump -uroot -p'My Pw!' shop > dump.sql", "My Pw!"),
    "mysql-password": ("mysql --password=Sql_Pw_42 -u app shop", "Sql_Pw_42"),
    "pgpass": ("db.internal:5432:shop:app:PgPass99x", "PgPass99x"),
    "pgpass-wildcards": ("cat ~/.pgpass\nlocalhost:*:*:postgres:Wild-Card-7", "Wild-Card-7"),
    "sshpass": ("sshpass -p 'Ss4Pw!x' ssh deploy@host", "Ss4Pw!x"),
    # Private keys pasted without their BEGIN and END lines.
    "private-key-body-pkcs8": (
        "here is the key:\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQDx7k2Lm9\n"
        "q8Wz3Vb6Nc1Xy5Ta0Rf4Gh7Jk2Lm9Pq8Wz3Vb6Nc1Xy5Ta0Rf4Gh7Jk2Lm9Pq8Wz3\nthanks",
        "q8Wz3Vb6Nc1Xy5Ta0Rf4Gh7Jk2Lm9Pq8Wz3Vb6Nc1Xy5Ta0Rf4Gh7Jk2Lm9Pq8Wz3",
    ),
    "private-key-body-rsa": (
        "MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9Oi4Qq9mLm2Lq3v5Xk8Wn0Y1zA2bC4dE6fG8hJ0kL2mN4pQ6r",
        "MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9Oi4Qq9mLm2Lq3v5Xk8Wn0Y1zA2bC4dE6fG8hJ0kL2mN4pQ6r",
    ),
    "private-key-body-ec": (
        "ec key MHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5cdWJ9HNXb0j2oAoGCCqGSM49AwEHoUQDQgAE end",
        "MHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5cdWJ9HNXb0j2oAoGCCqGSM49AwEHoUQDQgAE",
    ),
    "private-key-body-openssh": (
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
        "QyNTUxOQAAACDx9Kq2Lm8Rz3Vb6Nc1Xy5Ta0Rf4Gh7Jk2Lm9Pq8Wz3Vb6AAAAJgAAAAA",
        "QyNTUxOQAAACDx9Kq2Lm8Rz3Vb6Nc1Xy5Ta0Rf4Gh7Jk2Lm9Pq8Wz3Vb6AAAAJgAAAAA",
    ),
    # Passwords written in other languages.
    "password-chinese": ("数据库密码：Kx82!mQz，请保存", "Kx82!mQz"),  # noqa: RUF001
    "password-chinese-is": ("我的密码是Lp73qWe9", "Lp73qWe9"),
    "password-german": ("Passwort: Geheim-2024", "Geheim-2024"),
    "password-german-lautet": ("Das Kennwort lautet Sommer99!", "Sommer99!"),
    "password-french": ("Le mot de passe : Soleil#42", "Soleil#42"),
    "password-french-est": ("le mot de passe est Lune_77", "Lune_77"),
    "password-spanish": ("contraseña: Secreto-55", "Secreto-55"),
    "password-spanish-es": ("La contraseña es Playa2023", "Playa2023"),
    "password-russian": ("пароль: Zima_2024", "Zima_2024"),
    "password-russian-dash": ("Пароль — Moroz88", "Moroz88"),
    # Codes and session values written in text (long enough not to turn up by chance in a
    # digest or an id of the database dump).
    "pin-prose": ("my PIN is 48291637, don't share", "48291637"),
    "otp-colon": ("OTP: 73194628", "73194628"),
    "passcode-colon": ("door passcode: 90211734", "90211734"),
    "cookie-header": ("Cookie: sessionid=8fj3k2l1m0n9; csrftoken=Qw3rTy", "sessionid=8fj3k2l1m0n9"),
    "session-id-query": ("GET /app?session_id=s3ss10n-8842&page=2", "s3ss10n-8842"),
    # Cards written with slashes or double spaces, IBANs, US social security numbers.
    "card-slashes": ("card 4111/1111/1111/1111 ok", "4111/1111/1111/1111"),
    "card-double-spaces": ("card 5500  0000  0000  0004 ok", "5500  0000  0000  0004"),
    "iban-de-grouped": ("IBAN DE89 3704 0044 0532 0130 00, thanks", "DE89 3704 0044 0532 0130 00"),
    "iban-gb-compact": ("pay to GB82WEST12345698765432.", "GB82WEST12345698765432"),
    "iban-fr": ("RIB FR14 2004 1010 0505 0001 3M02 606", "FR14 2004 1010 0505 0001 3M02 606"),
    "ssn-dashes": ("SSN 123-45-6789", "123-45-6789"),
    "ssn-prose": ("her social security number is 219 09 9998.", "219 09 9998"),
    "ssn-compact": ("SSN#: 078051121", "078051121"),
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
    # Issue #39's keys, and more of their kind.
    "passcode",
    "pin",
    "PIN",
    "otp",
    "cookie",
    "Set-Cookie",
    "session_id",
    "sessionId",
    "auth",
    "passwords",
    "DB_PASS",
    "ssn",
]
# One plain value per key: nothing but the key says it is a secret.
KEY_VALUES = {key: f"plain-{index:02d}-value" for index, key in enumerate(SECRET_KEYS)}


# Secrets only a structured value holds: (the value, the secret as it would show in JSON).
STRUCTURED_FORMS: dict[str, tuple[object, str]] = {
    "card-json-number": ({"payment": {"card": 4111111111111111, "qty": 2}}, "4111111111111111"),
    "card-json-number-in-list": ([5500000000000004, 7, 19.5], "5500000000000004"),
    "secret-as-key": (
        {"sk_live_51HqLyjWDarjtT1zdp7dc4eD9": True},
        "sk_live_51HqLyjWDarjtT1zdp7dc4eD9",
    ),
    "password-in-key": ({"password=Kq7-x9Zl": "set"}, "Kq7-x9Zl"),
    # A zero-width space inside a key (someone trying, or a chat client's word breaking).
    "zero-width-in-token": (
        {"note": "use ghp_16C7e42F292c6\u200b912E7710c838347Ae178B4b"},
        "912E7710c838347Ae178B4b",
    ),
    "zero-width-in-password": ({"note": "password:\u200bZw-Pass-31"}, "Zw-Pass-31"),
}

# Each form of issue #39's list (its third finding), with the corpus entries that show it.
ISSUE_FORMS: dict[str, list[str]] = {
    "github_pat_": ["github-fine-grained", "github-fine-grained-short"],
    "glpat-": ["gitlab-pat", "gitlab-pat-new"],
    "AIza": ["google-api-key"],
    "Slack webhook URL": ["slack-webhook", "slack-webhook-no-scheme", "slack-workflow"],
    "Azure AccountKey=": ["azure-account-key", "azure-account-key-short", "azure-sas"],
    "SendGrid key": ["sendgrid", "sendgrid-short"],
    "Twilio API key": ["twilio-api-key"],
    "Twilio account SID and auth token": [
        "twilio-account-sid",
        "twilio-auth-token-env",
        "twilio-curl",
    ],
    ".env line": [
        "env-db-pass",
        "env-db-pass-lines",
        "env-foo-secret",
        "env-export-key",
        "env-smtp-password",
        "env-secret-key-base",
    ],
    "curl -u user:pw": ["curl-u", "curl-user-quoted"],
    "mysql -pPW": ["mysql-p", "mysqldump-p-quoted"],
    "mysql --password=PW": ["mysql-password"],
    ".pgpass line": ["pgpass", "pgpass-wildcards"],
    "private key without BEGIN/END": [
        "private-key-body-pkcs8",
        "private-key-body-rsa",
        "private-key-body-ec",
        "private-key-body-openssh",
    ],
    "password in Chinese": ["password-chinese", "password-chinese-is"],
    "password in German": ["password-german", "password-german-lautet"],
    "password in French": ["password-french", "password-french-est"],
    "password in Spanish": ["password-spanish", "password-spanish-es"],
    "password in Russian": ["password-russian", "password-russian-dash"],
    "value under passcode": ["key:passcode", "passcode-colon"],
    "value under pin": ["key:pin", "key:PIN", "pin-prose", "pin-code"],
    "value under otp": ["key:otp", "otp-colon"],
    "value under cookie": ["key:cookie", "key:Set-Cookie", "cookie-header"],
    "value under session_id": ["key:session_id", "key:sessionId", "session-id-query"],
    "value under auth": ["key:auth"],
    "value under passwords": ["key:passwords"],
    "card as a JSON number": ["card-json-number", "card-json-number-in-list"],
    "card with slashes": ["card-slashes"],
    "card with double spaces": ["card-double-spaces"],
    "IBAN": ["iban-de-grouped", "iban-gb-compact", "iban-fr"],
    "US SSN": ["ssn-dashes", "ssn-prose", "ssn-compact"],
}


def corpus_size() -> tuple[int, int]:
    """(distinct forms, examples): text forms plus key forms plus structured forms."""
    forms = len(TEXT_FORMS) + len(SECRET_KEYS) + len(STRUCTURED_FORMS)
    return forms, len(TEXT_FORMS) + len(KEY_VALUES) + len(STRUCTURED_FORMS)


def secrets() -> dict[str, str]:
    """Every secret of the corpus by name: what must not be found after redaction."""
    found = {name: secret for name, (_, secret) in TEXT_FORMS.items()}
    found.update({f"key:{key}": value for key, value in KEY_VALUES.items()})
    found.update({name: secret for name, (_, secret) in STRUCTURED_FORMS.items()})
    return found


def leaks(text: str) -> list[str]:
    """The names of the corpus's secrets found in `text`."""
    return [name for name, secret in secrets().items() if secret in text]


# Ordinary values that must come through `redacted` unchanged, in text. Each is what a tool or a
# person writes every day, and most look like a secret to a careless rule.
_PNG = (
    "data:image/png;base64,"
    + base64.b64encode(
        b"\x89PNG\r\n\x1a\n" + b"".join(hashlib.sha256(bytes([i])).digest() for i in range(96))
    ).decode()
)
BENIGN_TEXTS: dict[str, str] = {
    "git-sha": "commit 3f786850e387550fdab836ed7e6dc881de23001b",
    "git-short-sha": "fixed in a1b2c3d, see 9fceb02",
    "git-log": "Merge: 1d4c9c7 8a1f2e3\nAuthor: Ada <ada@example.com>\nDate: Mon Dec 7 2026",
    "uuid": "request 550e8400-e29b-41d4-a716-446655440000 done",
    "uuid-upper": "ID: F47AC10B-58CC-4372-A567-0E02B2C3D479",
    "uuids-list": "7c18bb6b-d60b-4797-0070-52878d941323, 0b0e7a44-1f3b-4e8e-9c2d-5ad1e2f3a4b5",
    "order-id": "order ORD-2024-000123-4567 shipped",
    "order-ids": "orders A-100234, B2002, #778812 and 2024-0012345",
    "amounts": "total 1,234.56 EUR; refund 12.50; fee $0.99; 1 234 567,89 €",
    "dates": "2024-01-15T10:30:00Z, 15.01.2024, 01/15/2024, 2024/01/15 10:30",
    "card-failing-luhn": "card 4111 1111 1111 1112 was declined",
    "card-failing-luhn-plain": "ref 4000000000000001",
    "iban-failing-checksum": "IBAN DE89 3704 0044 0532 0130 01 is invalid",
    "iban-failing-compact": "GB82WEST12345698765433",
    "iban-like-code": "part AB12 CDEF 3456 GHIJ 78",
    "url": "https://example.com/orders?page=2&sort=desc#top",
    "url-port-user": "ssh://git@github.com:22/org/repo.git and http://localhost:8000/admin/",
    "url-token-free-path": "https://api.example.com/v1/tokens/list?limit=10",
    "base64-image": f"![chart]({_PNG})",
    "prose-password": "Enter your password to continue. The password is incorrect.",
    "prose-token": "Each token costs money; the token budget is 4000 tokens.",
    "prose-key": "The key is in the drawer; press any key; the API key rotation runs monthly.",
    "prose-pin": "Pin the version to 1.2.3; pinned issues; spin up 3 workers; PIN reset requested.",
    "prose-secret": "It is no secret that the launch slipped.",
    "prose-password-for": "The password for every account is required; a PIN code is optional.",
    "webhook-docs": "See https://hooks.slack.com/ and https://example.com/api/webhooks/ docs",
    "prose-session": "session count: 12; the session expired at 10:30",
    "prose-code": "error code: 404; HTTP status code 200; code 1234 in the ticket",
    "code-python": "def login(password: str) -> bool:\n    return check(password, hashed)",
    "code-js": "const token = await getToken();\nif (!password) throw new Error('no password');",
    "code-sql": "SELECT id, password_hash FROM users WHERE email = %s",
    "code-shell": "mkdir -p build && python -m pytest -p no:cacheprovider && ssh -p 2222 host",
    "code-docker": "docker run -u 1000:1000 -p 8080:80 img; curl -u user https://x",
    "code-mysql-prompt": "mysql -u root -p shop (asks for the password)",
    "max-tokens": '{"max_tokens": 1024, "prompt_tokens": 12, "token_type": "bearer"}',
    "phone": "call +1 (555) 123-4567 or +44 20 7946 0958 or 555-123-4567",
    "times": "at 10:30:00, 12:45:30:15 and 08:00",
    "host-port": "see db.internal:5432 and redis:6379/0",
    "ip-mac": "192.168.100.200, fe80::1ff:fe23:4567:890a, 00:1a:2b:3c:4d:5e",
    "ssn-without-context": "part 123-45-6789 and ticket 987-65-4321",
    "ssn-invalid": "SSN 000-12-3456 is not valid, nor 666-45-6789",
    "hex-hash": "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "md5": "md5 d41d8cd98f00b204e9800998ecf8427e",
    "env-non-secret": "DEBUG=true\nDB_HOST=db.internal\nPAGE_SIZE=50\nSORT_KEY_NAME=created",
    "words-with-ac-sk": "AC adapter, SK hynix, ask the task, sk-learn, ACME Corp",
    "yaml-config": "retries: 3\ntimeout: 30s\nauthor: Ada\nkeyboard: us",
    "chinese-prose": "订单 12 号已发货，密码学课程下周开始",  # noqa: RUF001
    "german-prose": "Das Passwort muss mindestens 12 Zeichen lang sein.",
}

# Ordinary structured values: keys that only contain a secret word, numbers that are no card.
BENIGN_VALUES: dict[str, object] = {
    "key-names": {
        "max_tokens": 1024,
        "pinned": True,
        "spin": "fast",
        "author": "Ada",
        "session_count": 3,
        "passed": 12,
        "pass": 12,
        "keyboard": "us",
        "token_count": 7,
        "password_policy": "long",
        "cookie_consent": "yes",
        "otp_enabled": True,
        "pin_count": 2,
    },
    "numbers": [4111111111111112, 1733068800122, 20240115103000, 12345678901234, 3.14],
    "ids": {
        "id": "550e8400-e29b-41d4-a716-446655440000",
        "sha": "9fceb02d0ae598e95dc970b74767f19372d61af8",
    },
    "image": {"type": "image", "data": _PNG},
}
