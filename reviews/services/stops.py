"""The fleet's stop button, for the holder of `agentops.stop_fleet`: stop every task of an
agent, of a tool, or all of them, and resume them. Each wraps one engine command
(`fleet_stop`, `fleet_resume`) and logs its Decision in the same transaction."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction
from django.utils.translation import gettext as _

from agentops.engine import StopLifted, StopMade, fleet_resume, fleet_stop
from reviews.services._common import NotAllowed, decision_record
from reviews.states import VIA_UNKNOWN, Via

if TYPE_CHECKING:
    from django.contrib.auth.models import User

STOP_FLEET = "agentops.stop_fleet"


def stop_fleet_check(*, user: User) -> None:
    """Raise NotAllowed unless `user` holds the stop button's permission."""
    if not user.has_perm(STOP_FLEET):
        raise NotAllowed(_("only holders of the stop permission may stop or resume the fleet"))


def fleet_stop_apply(
    *, scope: str, target: str = "", reason: str, actor: User, via: Via = VIA_UNKNOWN
) -> StopMade:
    """Stop every task the scope covers, with the decision `reviews.fleet.stopped` (its detail
    names the stop, the tasks it paused and the running ones their workers pause). Raises
    NotAllowed, or StopRefused (unknown scope or target, no reason; StopConflict: the same stop
    already in force)."""
    stop_fleet_check(user=actor)
    with transaction.atomic():
        made = fleet_stop(scope=scope, target=target, reason=reason, actor=actor)
        stop = made.stop
        decision_record(
            action="reviews.fleet.stopped",
            actor=actor,
            subject=f"stop {stop.pk}: {stop}",
            reason=stop.reason,
            detail={
                "stop": stop.pk,
                "scope": stop.scope,
                "target": stop.target,
                "paused": made.paused,
                "running": made.running,
            },
            via=via,
        )
    return made


def fleet_resume_apply(
    *, stop_id: int, reason: str = "", actor: User, via: Via = VIA_UNKNOWN
) -> StopLifted:
    """Lift a stop and resume the tasks it paused, with the decision `reviews.fleet.resumed`
    (its detail names the tasks resumed and the queued ones released). Raises NotAllowed, or
    StopRefused (no such stop, or already lifted)."""
    stop_fleet_check(user=actor)
    with transaction.atomic():
        lifted = fleet_resume(stop_id=stop_id, actor=actor, reason=reason)
        stop = lifted.stop
        decision_record(
            action="reviews.fleet.resumed",
            actor=actor,
            subject=f"stop {stop.pk} lifted: {stop}",
            reason=reason.strip(),
            detail={
                "stop": stop.pk,
                "scope": stop.scope,
                "target": stop.target,
                "resumed": lifted.resumed,
                "released": lifted.released,
            },
            via=via,
        )
    return lifted
