"""What a tool's HTTP answer means (`agentops.sdk.http_answer`): whatever a service sends back, the
tool gets the JSON object it expected or a classified `ToolFailure`, never another exception."""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentops.engine.errors import FailureKind, ToolFailure
from agentops.sdk import http_answer

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
BODIES = JSON.map(lambda value: json.dumps(value).encode()) | st.binary(max_size=200)


@given(
    status=st.integers(min_value=200, max_value=599),
    body=BODIES,
    headers=st.dictionaries(
        st.sampled_from(["Retry-After", "WWW-Authenticate", "Content-Type"]),
        st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=60),
    ),
)
def test_any_answer_is_the_expected_object_or_a_classified_failure(status, body, headers):
    response = httpx.Response(status, content=body, headers=headers)

    try:
        answer = http_answer(response, name="svc.op", expect=("id",))
    except ToolFailure as failure:
        assert isinstance(failure.kind, FailureKind)
        assert str(failure).startswith("svc.op ")
    else:
        assert 200 <= status < 300 and isinstance(answer, dict) and "id" in answer


@pytest.mark.parametrize(
    ("status", "kind", "maybe_executed"),
    [
        (429, FailureKind.RATE_LIMITED, None),
        (403, FailureKind.AUTHORIZATION_GAP, None),
        (409, FailureKind.CONFLICT, None),
        (422, FailureKind.BAD_REQUEST, None),
        (503, FailureKind.UNAVAILABLE, True),
        (200, FailureKind.SCHEMA_MISMATCH, True),
    ],
)
def test_an_error_body_that_is_a_json_list_is_classified_by_its_status(
    status, kind, maybe_executed
):
    response = httpx.Response(status, json=["not", "an", "object"])

    with pytest.raises(ToolFailure) as failure:
        http_answer(response, name="svc.op")

    assert failure.value.kind == kind
    assert (failure.value.detail or {}).get("maybe_executed") == maybe_executed


def test_a_bearer_challenge_names_the_missing_scope():
    response = httpx.Response(
        403,
        json={"error": "forbidden"},
        headers={"WWW-Authenticate": 'Bearer error="insufficient_scope", scope="payments:credit"'},
    )

    with pytest.raises(ToolFailure) as failure:
        http_answer(response, name="payments.credit")

    assert failure.value.kind == FailureKind.AUTHORIZATION_GAP
    assert failure.value.detail == {"missing_scope": "payments:credit"}
    assert "forbidden" in str(failure.value)
