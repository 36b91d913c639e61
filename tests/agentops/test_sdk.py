"""The agent author's door (`agentops.sdk`): what a declaration gets wrong is refused when it
registers (at start-up, where a package's entry point names the distribution), never at a
worker's first call."""

from __future__ import annotations

import typing
from typing import Any

import pydantic
import pytest

from agentops import sdk
from agentops.engine import registry
from tests.library_words import pydantic_says


@pytest.fixture(autouse=True)
def registry_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tools declared here leave the registry with the test."""
    for name in ("_TOOLS", "_TOOL_ENTRIES"):
        monkeypatch.setattr(registry, name, dict(getattr(registry, name)))


class LooseParcel(typing.TypedDict):  # pydantic validates only typing_extensions' on 3.11
    status: str


def test_a_result_type_pydantic_cannot_validate_is_refused_when_the_tool_registers() -> None:
    declare = sdk.tool(side_effect="read", name="sdk_test_loose", result=LooseParcel)

    def loose(call: sdk.ToolContext, *, order_id: str) -> dict[str, Any]:
        return {"status": "delivered"}

    with pytest.raises(pydantic.PydanticUserError, match=r"typing_extensions\.TypedDict"):
        declare(loose)


def test_a_declared_result_type_validates_what_the_tool_returns() -> None:
    class Parcel(pydantic.BaseModel):
        status: str

    @sdk.tool(side_effect="read", name="sdk_test_parcel", result=Parcel)
    def parcel(call: sdk.ToolContext, *, order_id: str) -> dict[str, Any]:
        return {"status": "delivered"}

    parcel.check_result({"status": "delivered"})
    with pytest.raises(sdk.ToolFailure) as broken:
        parcel.check_result({"state": "delivered"})
    assert broken.value.kind is sdk.FailureKind.SCHEMA_MISMATCH
    assert f"result.status: {pydantic_says(Parcel, {'state': 'delivered'})}" in str(broken.value)


@pytest.mark.parametrize(
    ("declaration", "message"),
    [
        ({"side_effect": "delete"}, "side_effect must be one of"),
        ({"side_effect": "write", "max_attempts": 0}, "max_attempts must be at least 1"),
        ({"side_effect": "write", "timeout": 0.0}, "timeout must be more than zero"),
    ],
)
def test_a_tool_declared_out_of_range_is_refused(declaration: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sdk.tool(**declaration)
