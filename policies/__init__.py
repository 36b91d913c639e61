"""Tiered oversight policies: a pure evaluator, versioned rules, an admin editor and dry-runs.

This app imports no other app of the project; the host registers its tools and history through
`policies.catalog`.
"""

from __future__ import annotations
