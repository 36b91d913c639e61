from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")
application = get_wsgi_application()

from django.db import connection  # noqa: E402  (after setup)

from agentops.plumbing.postgres import limits_checked_at_start  # noqa: E402

limits_checked_at_start()
connection.close()  # each request opens its own, inside its database slot
