"""A database URL from Django's settings, for handing the same database to a child process.

The host may be a socket directory (the embedded server): it is percent-encoded, which libpq and
dj-database-url both read back. Query options (sslmode, ...) are kept.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode


def database_url(conf: dict[str, Any], *, name: str | None = None) -> str:
    user = quote(conf.get("USER") or "postgres", safe="")
    password = f":{quote(conf['PASSWORD'], safe='')}" if conf.get("PASSWORD") else ""
    host = quote(conf.get("HOST") or "127.0.0.1", safe="")
    port = f":{conf['PORT']}" if conf.get("PORT") else ""
    query = {
        key: value
        for key, value in (conf.get("OPTIONS") or {}).items()
        if key in {"sslmode", "sslrootcert", "sslcert", "sslkey", "target_session_attrs"}
    }
    suffix = f"?{urlencode(query)}" if query else ""
    return f"postgres://{user}{password}@{host}{port}/{quote(name or conf['NAME'])}{suffix}"
