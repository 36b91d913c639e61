"""Process plumbing that every process of the product shares, apart from the project shell
(settings, urls, wsgi, the command line) and from the domain: database slots and URLs, the
queue's Redis client, structured logs and request ids, guessing throttles, riding out outages of
PostgreSQL and Redis, the web helpers every app's views use, paging, the health endpoints, the
session engine, and the exporters of metrics (Prometheus) and traces (OpenTelemetry).

The domain builds on it, never the other way: when it runs it imports nothing of the apps but two
pure rules of the engine it applies on the way out (spans leave redacted, the cost counter prices
tokens as the runner does); annotations may name the models (tests/test_boundaries.py).
"""
