"""Development tooling, kept apart from the product: the simulated third-party services (`sim`),
the demo scenarios and stack (`scenarios`, `devstack`, `runstack`), the chaos run, the benchmarks
and the embedded PostgreSQL and Redis servers.

Production settings install none of its Django apps (`agentops.dev` with the development commands,
`agentops.dev.sim`); development settings (`AGENTOPS_DEV=1`) install both. The one module the
product itself uses is `embedded`, which the settings ask for a server URL when `DATABASE_URL` /
`REDIS_URL` are unset; so this package's `__init__` imports nothing.
"""
