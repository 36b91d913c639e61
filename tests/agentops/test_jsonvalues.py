from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import Any

import hypothesis
import pytest
from django.core.files.storage import default_storage
from hypothesis import assume, given
from hypothesis import strategies as st

from agentops.engine.errors import NotSerializable
from agentops.engine.jsonvalues import (
    canonical_json,
    digest,
    encoded,
    is_pointer,
    loaded,
    offloaded,
    validated,
)
from agentops.models import Artifact

ROOT = Path(__file__).resolve().parents[2]


def nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


# What PostgreSQL can store in jsonb: no NUL, no lone surrogates (tested on their own below).
storable = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(storable, max_size=12)
)
# Keys are distinct after NFC: `validated` refuses two keys that differ only in normal form (the
# canonical form could not tell them apart; tested below), so no stored value has them.
keys = st.text(storable, max_size=8).map(nfc)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4),
    max_leaves=24,
)


def reordered(value: Any, rnd: random.Random) -> Any:
    """The same value with every object's keys inserted in a shuffled order."""
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: reordered(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [reordered(v, rnd) for v in value]
    return value


def strings_in(value: Any, form: str) -> Any:
    """The same value with every string, keys included, in Unicode normal form `form`."""
    if isinstance(value, str):
        return unicodedata.normalize(form, value)
    if isinstance(value, dict):
        return {unicodedata.normalize(form, k): strings_in(v, form) for k, v in value.items()}
    if isinstance(value, list):
        return [strings_in(v, form) for v in value]
    return value


def floats_for_ints(value: Any) -> Any:
    """The same value with every integer that a float holds exactly written as a float."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and abs(value) <= 2**53:
        return float(value)
    if isinstance(value, dict):
        return {k: floats_for_ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [floats_for_ints(v) for v in value]
    return value


def meaning(value: Any) -> Any:
    """An independent statement of when two values are the same arguments."""
    if value is None:
        return ("null",)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, float) and value.is_integer():
        return ("number", int(value))
    if isinstance(value, (int, float)):
        return ("number", value)
    if isinstance(value, str):
        return ("string", nfc(value))
    if isinstance(value, list):
        return ("array", tuple(meaning(v) for v in value))
    return ("object", frozenset((nfc(k), meaning(v)) for k, v in value.items()))


# -- canonical form and digest -----------------------------------------------------------------


@given(json_values, st.randoms(use_true_random=False))
def test_key_order_does_not_change_the_digest(value, rnd):
    shuffled = reordered(value, rnd)

    assert canonical_json(shuffled) == canonical_json(value)
    assert digest(shuffled) == digest(value)


@given(json_values)
def test_nfc_and_nfd_strings_give_the_same_digest(value):
    composed, decomposed = strings_in(value, "NFC"), strings_in(value, "NFD")

    assert digest(composed) == digest(decomposed) == digest(value)


def test_composed_and_decomposed_accents_are_the_same_argument():
    composed = {"name": "Caf\u00e9", "city": "Z\u00fcrich"}
    decomposed = {"name": "Cafe\u0301", "city": "Zu\u0308rich"}

    assert composed != decomposed
    assert digest(composed) == digest(decomposed)
    assert canonical_json(decomposed) == '{"city":"Z\u00fcrich","name":"Caf\u00e9"}'


@given(json_values)
def test_integral_floats_and_ints_give_the_same_digest(value):
    assert digest(floats_for_ints(value)) == digest(value)


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (1, 1.0),
        (1.5, json.loads("1.50")),
        (-0.0, 0),
        (10**16, 1e16),
        ({"amount": 10, "items": [{"qty": 2.0}]}, {"items": [{"qty": 2}], "amount": 10.0}),
        ({"a": {"b": [1.0, {"c": "e\u0301"}]}}, {"a": {"b": [1, {"c": "\u00e9"}]}}),
    ],
    ids=["int-float", "trailing-zero", "negative-zero", "large", "nested", "deeply-nested"],
)
def test_number_forms_that_mean_the_same_give_the_same_digest(left, right):
    assert digest(left) == digest(right)


@given(json_values, json_values)
def test_values_that_mean_different_things_give_different_digests(left, right):
    assume(meaning(left) != meaning(right))

    assert canonical_json(left) != canonical_json(right)
    assert digest(left) != digest(right)


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (True, 1),
        (False, 0),
        ("1", 1),
        (None, "null"),
        ("", None),
        ([], {}),
        ([1, 2], [2, 1]),
        ({"a": 1}, {"a": 1, "b": None}),
        ({"a": [1]}, {"a": 1}),
        (0.1, 0.1 + 2**-56),
        ({"amount": 10.5}, {"amount": 10.05}),
        ("Cafe", "Caf\u00e9"),
    ],
    ids=lambda value: repr(value),
)
def test_near_misses_give_different_digests(left, right):
    assert digest(left) != digest(right)


@given(json_values)
def test_digest_is_sha256_of_the_canonical_utf8(value):
    assert digest(value) == hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def _same_json(a: Any, b: Any) -> bool:
    """Equal with the same types (1.0 == 1 in Python, not in an exact record)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@given(json_values)
def test_encoded_bytes_are_called_exact_only_when_they_read_back_as_the_value(value):
    known = encoded(value)

    assert known.data == canonical_json(value).encode()
    assert known.exact == _same_json(json.loads(known.data), value)


# A dict built from a set: its key order depends on the process's hash seed.
FIXED = (
    "{k: len(k) for k in {'alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta'}}"
    " | {'amount': 10.50, 'note': 'Cafe\\u0301', 'items': [{'qty': 1.0, 'sku': 'SKU-1'}],"
    " 'ok': True, 'none': None}"
)
FIXED_CANONICAL = (
    '{"alpha":5,"amount":10.5,"beta":4,"delta":5,"epsilon":7,"gamma":5,'
    '"items":[{"qty":1,"sku":"SKU-1"}],"none":null,"note":"Caf\u00e9","ok":true,"zeta":4}'
)
FIXED_DIGEST = hashlib.sha256(FIXED_CANONICAL.encode()).hexdigest()


def test_digest_is_stable_across_processes_and_hash_seeds():
    code = f"from agentops.engine.jsonvalues import digest; print(digest({FIXED}))"
    outputs = []
    for seed in ("0", "1", "4242"):
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONHASHSEED": seed},
            check=True,
        )
        outputs.append(done.stdout.strip())

    assert outputs == [FIXED_DIGEST] * 3


# -- validation ---------------------------------------------------------------------------------


class DataFrame:
    """Stands for any object a tool might hand back that is not JSON."""


def test_validated_names_the_path_of_a_non_json_value():
    context = {
        "messages": [
            {"content": "a"},
            {"content": "b"},
            {"content": "c"},
            {"role": "tool", "content": DataFrame()},
        ]
    }

    with pytest.raises(NotSerializable) as caught:
        validated(context, "context")

    assert str(caught.value) == "context.messages[3].content: DataFrame is not JSON-serializable"
    assert caught.value.path == "context.messages[3].content"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"x": float("nan")}, "args.x: float is not JSON-serializable"),
        ({"x": [1, float("inf")]}, "args.x[1]: float is not JSON-serializable"),
        ({"x": -float("inf")}, "args.x: float is not JSON-serializable"),
        ({1: "one"}, "args.<key 1>: int is not JSON-serializable"),
        ({"x": (1, 2)}, "args.x: tuple is not JSON-serializable"),
        ({"x": {"y": {1, 2}}}, "args.x.y: set is not JSON-serializable"),
        ({"x": b"bytes"}, "args.x: bytes is not JSON-serializable"),
    ],
    ids=["nan", "inf-in-list", "minus-inf", "int-key", "tuple", "set", "bytes"],
)
def test_validated_rejects_what_json_cannot_hold(value, message):
    with pytest.raises(NotSerializable) as caught:
        validated(value, "args")

    assert str(caught.value) == message


def test_canonical_json_rejects_nan():
    with pytest.raises(ValueError, match="JSON"):
        canonical_json({"x": float("nan")})


@given(json_values)
def test_validated_returns_plain_json_unchanged(value):
    assert validated(value, "value") is value


# -- offloading ---------------------------------------------------------------------------------


@pytest.fixture
def small_threshold(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path
    settings.AGENTOPS = {**settings.AGENTOPS, "ARTIFACT_THRESHOLD_BYTES": 64}
    return tmp_path


@pytest.mark.django_db
def test_offloaded_stores_a_large_value_as_an_artifact(small_threshold):
    value = {"text": "\u00e9" * 100, "rows": [[i, i * 1.5] for i in range(5)]}
    # Keys sorted, as jsonb keeps them; the float 0.0 stays a float (the file is exact).
    data = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()

    pointer = offloaded(value, path="step.output", task_id=None)

    assert is_pointer(pointer)
    assert pointer["size"] == len(data) > 64
    assert pointer["sha256"] == hashlib.sha256(data).hexdigest()
    assert pointer["path"] == "step.output"
    artifact = Artifact.objects.get()
    assert (artifact.pk, artifact.size, artifact.sha256) == (
        pointer["$artifact"],
        len(data),
        pointer["sha256"],
    )
    assert (small_threshold / artifact.name).read_bytes() == data
    assert loaded(pointer) == value


@pytest.mark.django_db
def test_offloaded_stores_the_canonical_bytes_when_they_are_exact(small_threshold):
    value = {"b": "x" * 100, "a": 1}
    known = encoded(value)

    pointer = offloaded(value, path="tool_call.args", task_id=None, known=known)

    assert known.exact
    assert pointer["sha256"] == known.sha256 == digest(value)
    assert (small_threshold / Artifact.objects.get().name).read_bytes() == known.data
    assert loaded(pointer) == value


@pytest.mark.django_db
def test_offloaded_stores_the_value_itself_when_its_canonical_form_differs(small_threshold):
    value = {"count": 2.0, "text": "e\u0301" * 50}
    known = encoded(value)

    pointer = offloaded(value, path="tool_call.args", task_id=None, known=known)

    assert not known.exact
    stored = loaded(pointer)
    assert stored == value
    assert isinstance(stored["count"], float)
    assert stored["text"] == value["text"]


@pytest.mark.django_db
def test_a_value_stored_twice_is_one_file(small_threshold):
    value = {"text": "z" * 200}

    first = offloaded(value, path="step.output", task_id=None)
    second = offloaded(dict(value), path="tool_call.result", task_id=None)

    names = set(Artifact.objects.values_list("name", flat=True))
    assert first["sha256"] == second["sha256"]
    assert len(names) == 1
    assert loaded(second) == value


@pytest.mark.django_db
def test_a_file_cut_short_is_not_reused(small_threshold):
    value = {"text": "q" * 200}
    first = offloaded(value, path="step.output", task_id=None)
    short = Artifact.objects.get(pk=first["$artifact"])
    (small_threshold / short.name).write_bytes(b'{"text":"qq')

    second = offloaded(value, path="step.output", task_id=None)

    assert Artifact.objects.get(pk=second["$artifact"]).name != short.name
    assert loaded(second) == value


@pytest.mark.django_db
def test_offloaded_stores_a_long_string_too(small_threshold):
    text = "x" * 500

    pointer = offloaded(text, path="tool_call.result", task_id=None)

    assert is_pointer(pointer)
    assert loaded(pointer) == text


@pytest.mark.django_db
def test_offloaded_returns_small_values_and_numbers_unchanged(small_threshold):
    small = {"a": 1, "b": "two"}
    big_number = 10**80

    assert offloaded(small, path="step.output", task_id=None) is small
    assert offloaded(big_number, path="step.output", task_id=None) == big_number
    assert loaded(small) is small
    assert Artifact.objects.count() == 0


@pytest.mark.django_db
def test_offloaded_rejects_a_non_json_value_before_storing_anything(small_threshold):
    with pytest.raises(NotSerializable, match=r"step\.output\.frame: DataFrame"):
        offloaded({"frame": DataFrame(), "pad": "x" * 500}, path="step.output", task_id=None)

    assert Artifact.objects.count() == 0
    assert not any(small_threshold.rglob("*.json"))


@pytest.mark.django_db
def test_loaded_refuses_an_artifact_whose_bytes_changed(small_threshold):
    pointer = offloaded({"text": "y" * 200}, path="step.output", task_id=None)
    artifact = Artifact.objects.get()
    default_storage.delete(artifact.name)
    (small_threshold / artifact.name).write_text('{"text":"tampered"}')

    with pytest.raises(ValueError, match="sha256 mismatch"):
        loaded(pointer)


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"\ud800": 1}, "input.<key '\\ud800'>"),
        ({"a": ["ok", "x\x00y"]}, "input.a[1]"),
        ({"b": {"c": "\udfff"}}, "input.b.c"),
    ],
    ids=["surrogate-key", "nul-in-list", "surrogate-value"],
)
def test_what_postgresql_refuses_is_refused_at_save_time_with_its_path(value, path):
    with pytest.raises(NotSerializable) as caught:
        validated(value, "input")
    assert str(caught.value).startswith(path + ": contains a")


# Any string, NUL, control characters and lone surrogates included: the bytes must be json's.
any_text = st.text(st.characters(), max_size=12)
any_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | any_text | st.floats(allow_nan=False),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(any_text, children, max_size=4)
    ),
    max_leaves=24,
)


def _json_outcome(write, value):
    try:
        return write(value)
    except (ValueError, UnicodeEncodeError) as exc:
        return type(exc)


@hypothesis.settings(max_examples=500)
@hypothesis.example({"b": "x" * 5000, "a": ['\u2028\x7f\x1f"\\\n', -(2**70), True, None]}, False)
@hypothesis.example({"s": "\ud800"}, False)
@hypothesis.example({"f": 1e-07, "g": 1e16, "h": 0.0001, "i": -0.0, "j": 1e-05}, False)
@hypothesis.example({"n": 10**5000}, True)  # json refuses it: so must the fast path
@hypothesis.example({"z": 1, "a": [2**64, -(2**63) - 1, 2**63]}, False)
@given(any_json_values, st.booleans())
def test_json_bytes_are_the_bytes_json_dumps_writes(value, sort_keys):
    from agentops.engine.jsonvalues import json_bytes

    def json_writes(v):
        return json.dumps(
            v, sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        ).encode()

    assert _json_outcome(lambda v: json_bytes(v, sort_keys=sort_keys), value) == _json_outcome(
        json_writes, value
    )


def _parse_outcome(parse, text):
    try:
        return repr(parse(text))  # repr tells 1 from 1.0 and True, -0.0 from 0.0, and key order
    except (RecursionError, ValueError):  # json_parsed turns json's RecursionError into this
        return ValueError


any_number_values = st.recursive(
    st.none() | st.booleans() | st.integers() | any_text | st.floats(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(any_text, children, max_size=4)
    ),
    max_leaves=24,
)


@hypothesis.settings(max_examples=500)
@hypothesis.example('{"a": "\\ud800", "\\udc00": [NaN, -Infinity, 1e400, -0.0]}')
@hypothesis.example('{"a": 1, "a": 2.50, "b": 1E5, "c": ' + "7" * 4300 + "}")
@hypothesis.example('{"n": ' + "7" * 4301 + "}")
@hypothesis.example("[" * 300 + "]" * 300)
@hypothesis.example("[" * 5000 + "]" * 5000)
@hypothesis.example('\ufeff{"a": 1}')
@hypothesis.example('{"a": "\x01"}')
@hypothesis.example('{"a": 1} x')
@hypothesis.example("[1,]")
@given(
    any_number_values.map(lambda v: json.dumps(v, ensure_ascii=False))
    | any_number_values.map(lambda v: json.dumps(v, indent=1))
    | st.text(st.sampled_from('{}[]",:0123456789.eE+-tfnaluINy \\u'), max_size=20)
    | st.from_regex(r"-?(0|[1-9][0-9]{0,30})(\.[0-9]{1,30})?([eE][+-]?[0-9]{1,3})?", fullmatch=True)
)
def test_json_parsed_gives_what_json_loads_gives(text):
    from agentops.engine.jsonvalues import json_parsed

    assert _parse_outcome(json_parsed, text) == _parse_outcome(json.loads, text)


def test_a_model_reply_nested_too_deeply_for_json_is_invalid_output():
    from agentops.engine.errors import ModelFailure
    from agentops.engine.model import parse_response

    with pytest.raises(ModelFailure) as failure:
        parse_response("[" * 100_000 + "]" * 100_000, usage={})

    assert failure.value.kind == "output_invalid"


def test_a_model_reply_is_parsed_once_by_pydantic_core(monkeypatch):
    import pydantic_core

    from agentops.engine.model import parse_response

    parsed: list[int] = []
    from_json = pydantic_core.from_json

    def counted(text):
        parsed.append(len(text))
        return from_json(text)

    monkeypatch.setattr(pydantic_core, "from_json", counted)
    monkeypatch.setattr(json, "loads", lambda *args, **kwargs: pytest.fail("parsed by json"))
    raw = json.dumps({"tool_calls": [{"name": "bench_echo", "arguments": {"payload": "x" * 9}}]})

    response = parse_response(raw, usage={})

    assert response.tool_calls[0]["arguments"] == {"payload": "x" * 9}
    assert parsed == [len(raw)]


# -- what cannot be stored, anywhere in a value ---------------------------------------------


def nested(depth: int) -> list[Any]:
    """A list nested `depth` levels deep (built without recursion)."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


# One of each kind of part `validated` refuses. "too deep" is deeper than MAX_DEPTH but shallow
# enough for json and repr (a failing example is printed).
UNSTORABLE: dict[str, Any] = {
    "lone surrogate": "a\ud800b",
    "NUL": "a\x00b",
    "bytes": b"x",
    "set": {1, 2},
    "tuple": (1, 2),
    "object": object(),
    "NaN": float("nan"),
    "infinity": float("inf"),
    "minus infinity": float("-inf"),
    "huge int": 10**5000,
    "int key": {1: "one"},
    "NFC twins": {"\u00e9": 1, "e\u0301": 2},
    "too deep": nested(300),
}
# The ones a JSON text can carry (what a model server can send): json.dumps writes NaN and
# Infinity, and escapes lone surrogates and NUL.
ON_THE_WIRE = (
    "lone surrogate",
    "NUL",
    "NaN",
    "infinity",
    "minus infinity",
    "NFC twins",
    "too deep",
)


def _containers(value: Any, path: str) -> list[tuple[Any, str]]:
    found: list[tuple[Any, str]] = []
    if isinstance(value, dict):
        found.append((value, path))
        for key, item in value.items():
            found += _containers(item, f"{path}.{key}")
    elif isinstance(value, list):
        found.append((value, path))
        for index, item in enumerate(value):
            found += _containers(item, f"{path}[{index}]")
    return found


@st.composite
def with_unstorable_parts(
    draw: st.DrawFn, base: st.SearchStrategy[Any], kinds: tuple[str, ...] = tuple(UNSTORABLE)
) -> tuple[Any, list[str]]:
    """A value from `base` (plain JSON with at least one container) with one to three unstorable
    parts added at random places; and the paths (from the root, "" for the root itself) of
    the parts added. Dicts get a new key (longer than any key `keys` makes), lists a new last
    item, so the paths of earlier additions stay true."""
    value = draw(base)
    places = _containers(value, "")
    paths = []
    for number in range(draw(st.integers(1, 3))):
        container, path = draw(st.sampled_from(places))
        part = UNSTORABLE[draw(st.sampled_from(kinds))]
        if isinstance(container, dict):
            key = f"injected-{number}"
            container[key] = part
            paths.append(f"{path}.{key}")
        else:
            paths.append(f"{path}[{len(container)}]")
            container.append(part)
    return value, paths


json_objects = st.dictionaries(keys, json_values, max_size=4)


@hypothesis.settings(max_examples=300)
@given(with_unstorable_parts(json_objects))
def test_validated_refuses_any_unstorable_part_with_its_path_and_nothing_else(case):
    value, paths = case

    with pytest.raises(NotSerializable) as caught:
        validated(value, "value")

    # The first refused part in walk order: one of those added (a deep one or a bad key is
    # named below the place it was added).
    assert any(caught.value.path.startswith(f"value{path}") for path in paths), caught.value.path


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_validated_refuses_deep_nesting_with_its_path_never_a_recursion_error(depth):
    from agentops.engine.jsonvalues import MAX_DEPTH

    with pytest.raises(NotSerializable) as caught:
        validated({"a": nested(depth)}, "input")

    assert caught.value.path == "input.a" + "[0]" * (MAX_DEPTH - 1)
    assert str(caught.value).endswith(f": nested deeper than {MAX_DEPTH} levels")


def test_validated_takes_nesting_up_to_max_depth_and_every_walker_handles_it():
    from agentops.engine.jsonvalues import MAX_DEPTH, json_bytes, redacted

    deepest = {"a": nested(MAX_DEPTH - 1)}

    assert validated(deepest, "input") is deepest
    # A few levels more, as the engine wraps a stored value (a record, a message):
    wrapped = {"messages": [{"content": deepest}]}
    assert json.loads(json_bytes(wrapped)) == wrapped
    assert json.loads(canonical_json(wrapped)) == wrapped
    assert redacted(wrapped) == wrapped
    assert len(digest(wrapped)) == 64
    with pytest.raises(NotSerializable):
        validated({"a": nested(MAX_DEPTH)}, "input")


def test_validated_refuses_an_int_too_long_to_write_and_keys_equal_in_nfc():
    with pytest.raises(NotSerializable, match=r"^args\.n: an integer too long to write$"):
        validated({"n": 10**5000}, "args")
    with pytest.raises(NotSerializable, match="is the same key as another one in Unicode NFC"):
        validated({"x": {"\u00e9": 1, "e\u0301": 2}}, "args")
    assert validated({"n": 10**4000}, "args") == {"n": 10**4000}


def test_a_failure_quoting_unstorable_text_is_stored_with_it_replaced():
    from agentops.engine.errors import ToolFailure

    failure = ToolFailure("remote said a\x00b\ud800", detail={"body": "x\x00", "n": 1})

    recorded = failure.as_failure()

    assert recorded["message"] == "remote said a\ufffdb\ufffd"
    assert recorded["detail"] == {"body": "x\ufffd", "n": 1}
    assert validated(recorded, "failure") is recorded
