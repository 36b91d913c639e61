"""The review API's endpoints of the fleet's stop button: the stops (in force first), making a
stop of every task, an agent's or a tool's, and lifting it. For holders of
`agentops.stop_fleet`; each write is one decision in the log, marked as an API decision."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from django.db.models import F
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from ninja import Schema, Status

from agentops.api import ROLE, ApiRequest, Error, TokenAuth, page_of
from agentops.engine import StopConflict, StopRefused
from agentops.models import FleetStop
from reviews.api._common import api_via, refusals, router
from reviews.services.stops import STOP_FLEET, fleet_resume_apply, fleet_stop_apply

STOPPERS_ONLY = TokenAuth(
    STOP_FLEET, gettext_lazy("stopping and resuming the fleet is for its stop holders")
)


class StopOut(Schema):
    id: int
    scope: str
    target: str
    reason: str
    stopped_by: str
    created_at: datetime
    in_force: bool
    paused_at_stop: int
    lifted_by: str
    lifted_at: datetime | None
    lift_reason: str

    @staticmethod
    def resolve_stopped_by(stop: FleetStop) -> str:
        return stop.stopped_by_label

    @staticmethod
    def resolve_lifted_by(stop: FleetStop) -> str:
        return stop.lifted_by_label


class StopIn(Schema):
    scope: Literal["all", "agent", "tool"]
    target: str = ""
    reason: str


class StopMadeOut(Schema):
    stop: StopOut
    # Paused by the stop; `running`: held by workers, each paused at its next safe point.
    paused: list[int]
    running: list[int]


class ResumeIn(Schema):
    reason: str = ""


class StopLiftedOut(Schema):
    stop: StopOut
    resumed: list[int]
    released: list[int]


@router.get(
    "/stops",
    response={200: list[StopOut], **ROLE},
    summary="The fleet's stops, those in force first, then the newest",
    auth=STOPPERS_ONLY,
)
def list_stops(request: ApiRequest, limit: int = 50, offset: int = 0) -> list[FleetStop]:
    stops = FleetStop.objects.order_by(F("lifted_at").desc(nulls_first=True), "-created_at", "-id")
    return page_of(stops, limit, offset)


@router.post(
    "/stops",
    response={201: StopMadeOut, 400: Error, 409: Error, **ROLE},
    summary="Stop every task, every task of an agent, or every call of a tool",
    auth=STOPPERS_ONLY,
)
def make_stop(request: ApiRequest, payload: StopIn) -> Status[dict[str, object]]:
    with refusals(conflicts=(StopConflict,), invalid=(StopRefused,)):
        made = fleet_stop_apply(
            scope=payload.scope,
            target=payload.target,
            reason=payload.reason,
            actor=request.user,
            via=api_via(request),
        )
    return Status(201, {"stop": made.stop, "paused": made.paused, "running": made.running})


@router.post(
    "/stops/{stop_id}/resume",
    response={200: StopLiftedOut, 404: Error, 409: Error, **ROLE},
    summary="Lift a stop and resume the tasks it paused",
    auth=STOPPERS_ONLY,
)
def lift_stop(request: ApiRequest, stop_id: int, payload: ResumeIn) -> dict[str, object]:
    with refusals(
        missing=_("no stop %(id)s") % {"id": stop_id},
        not_found=(FleetStop.DoesNotExist,),
        conflicts=(StopConflict,),
        invalid=(StopRefused,),
    ):
        if not FleetStop.objects.filter(pk=stop_id).exists():
            raise FleetStop.DoesNotExist
        lifted = fleet_resume_apply(
            stop_id=stop_id, reason=payload.reason, actor=request.user, via=api_via(request)
        )
    return {"stop": lifted.stop, "resumed": lifted.resumed, "released": lifted.released}
