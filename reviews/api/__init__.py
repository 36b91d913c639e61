"""The review endpoints of the JSON API (`/api/v1/`), one module per sub-domain on one django-ninja
router: tasks (`tasks`: the stopped ones, plan repair, a task's decisions, start again and fork),
gates and their decisions and notices (`gates`), agents' questions (`questions`), scope grants
(`grants`), the audit queue (`audit`) and its rubric reviews (`rubrics`), and the fleet's stop
button (`stops`). The project shell
(`agentops/urls.py`) mounts `reviews.api.router` next to the other apps' routers; authentication,
the error answers and paging are `agentops.api`'s.

The permissions are this app's (`reviews.roles`), checked by `TokenAuth` before the path, query
and body are read; a decision goes through the one decision service (`reviews.services.gates`),
needs the digest the caller saw (409 when it is stale or someone decided first), keeps separation
of duties, and is one entry in the decision log, marked as an API decision with the token that
made it.
"""

from __future__ import annotations

# Importing each module adds its endpoints to the router (operation ids are the functions' names,
# so where a function lives changes nothing of the OpenAPI document's operations).
from reviews.api import audit, gates, grants, oversight, questions, rubrics, stops, tasks
from reviews.api._common import router

__all__ = [
    "audit",
    "gates",
    "grants",
    "oversight",
    "questions",
    "router",
    "rubrics",
    "stops",
    "tasks",
]
