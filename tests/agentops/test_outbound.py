"""No outbound call inside a transaction: the check refuses one, the engine's calls pass it, and
a notification sender inside a transaction sends nothing and records why."""

from __future__ import annotations

import pytest
from django.db import transaction

from agentops.engine.outbound import OutboundInTransaction, in_transaction, outbound_check


@pytest.mark.django_db
def test_an_outbound_call_inside_a_transaction_is_refused_and_outside_one_allowed():
    outside = in_transaction()
    outbound_check("a call between transactions")
    with transaction.atomic(), pytest.raises(OutboundInTransaction, match="commit first"):
        outbound_check("a call inside one")

    assert outside is False  # the test's own wrapping transaction does not count


@pytest.mark.django_db(transaction=True)
def test_without_a_test_transaction_only_an_atomic_block_counts():
    before = in_transaction()
    with transaction.atomic():
        inside = in_transaction()
        with transaction.atomic():
            nested = in_transaction()

    assert (before, inside, nested, in_transaction()) == (False, True, True, False)
