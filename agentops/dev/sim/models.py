"""Tables of the simulated third-party services: the effects they performed and their faults.

These stand for other companies' systems. The engine never reads them; tests and the demo count
effects per idempotency key here to prove that nothing ran twice.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class FaultMode(models.TextChoices):
    OK = "ok", "Behave normally"
    RATE_LIMITED = "429", "429 with Retry-After"
    ERROR_BEFORE = "5xx_before", "5xx, no effect"
    TIMEOUT_BEFORE = "timeout_before", "Time out, no effect"
    EXECUTE_THEN_TIMEOUT = "execute_then_timeout", "Perform the effect, then time out"
    EXECUTE_THEN_5XX = "execute_then_5xx", "Perform the effect, then answer 5xx"
    SLOW = "slow", "Answer slowly"
    SCHEMA_CHANGE = "schema_change", "Answer in an unexpected shape"
    FORBIDDEN = "forbidden", "403 Forbidden"
    OUT_OF_ORDER = "out_of_order", "Perform the effect, answer with another request's response"
    DUPLICATE = "duplicate", "Receive the request twice (a duplicated delivery)"


class Effect(models.Model):
    service = models.CharField(max_length=50)
    operation = models.CharField(max_length=50)
    # NULL, not "", for calls without a key: the unique constraint applies only to keyed calls.
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    # The Idempotency-Key header as the client sent it, also where the endpoint ignores keys:
    # tests and scenarios count effects per key with it.
    request_key = models.CharField(max_length=255, blank=True, db_index=True)
    request_digest = models.CharField(max_length=64)
    request = models.JSONField()
    response = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["service", "operation", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="sim_effect_key_uniq",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.service}.{self.operation} {self.idempotency_key or '(no key)'}"


class Fault(models.Model):
    service = models.CharField(max_length=50)
    operation = models.CharField(max_length=50)
    mode = models.CharField(max_length=32, choices=FaultMode.choices, default=FaultMode.OK)
    # How many calls the fault applies to; None means every call until it is reset.
    remaining = models.PositiveIntegerField(null=True, blank=True)
    delay_seconds = models.FloatField(default=0.0)

    class Meta:
        ordering = ["service", "operation"]
        constraints = [
            models.UniqueConstraint(
                fields=["service", "operation"], name="sim_fault_endpoint_uniq"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.service}.{self.operation}: {self.mode}"
