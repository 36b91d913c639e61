"""Settings for the simulated services' own process: the main settings, serving only `/sim/`.

A third party's API takes no browser sessions, so this process runs without session, auth or CSRF
middleware: nothing here is reachable from the product's pages. These settings live beside the
`sim` app rather than in it: they are how this project hosts the simulated services (its database,
its embedded servers), and the app itself knows nothing of the project.
"""

from __future__ import annotations

from agentops.settings import *  # noqa: F403

ROOT_URLCONF = "agentops.dev.sim.urls"
MIDDLEWARE = [
    "django.middleware.common.CommonMiddleware",
    "agentops.dev.sim.middleware.DatabaseUnavailableMiddleware",
]
INSTALLED_APPS = [app for app in INSTALLED_APPS if app != "django.contrib.admin"]  # noqa: F405
# Clients on other hosts (agentops.dev.hosts) name it by their link's address: whichever name
# they use, the process listens on 127.0.0.1 only.
ALLOWED_HOSTS = ["*"]
