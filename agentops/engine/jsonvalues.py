"""Everything persisted is JSON: validation with a path, canonical form, digests, offloading.

`validated` runs at save time, so a bad value fails where it was produced and never at restore.
`canonical_json` is the one definition of "the same arguments" that idempotency keys are built on.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import orjson
import pydantic_core
from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import FileSystemStorage, default_storage

from agentops.engine.errors import FailureKind, NotSerializable, StepFailure

# Redaction is a part of the save path; it lives in its own module and is named here too.
from agentops.engine.redaction import REDACTED as REDACTED
from agentops.engine.redaction import redacted as redacted
from agentops.engine.syncs import Syncs
from agentops.engine.syncs import fsync_directory as fsync_directory
from agentops.engine.texts import storable_texts as storable_texts
from agentops.engine.texts import text_refusal

ARTIFACT_KEY = "$artifact"


# JSON nested deeper than this is refused: deeper than any document a person, a model or a tool
# writes, and far inside Python's recursion limit (1,000 frames), so every recursive walker of
# stored values (json itself, the canonical form, redaction) handles them from any call depth,
# with room for the few levels the engine wraps around them (a record, a message).
MAX_DEPTH = 200
# An int of at most this many bits has at most 4,214 digits, within the 4,300 Python converts
# to text by default (`sys.get_int_max_str_digits`); larger ones are tried.
_SHORT_INT_BITS = 14_000


def validated(value: Any, path: str) -> Any:
    """Return `value` if it is plain JSON that PostgreSQL can store and the engine can write
    and digest, else raise NotSerializable naming the offending path: a non-JSON type, NaN or
    infinity, a non-str key, a NUL character or a lone surrogate, an int too long to write,
    two keys of one object that are the same string in Unicode NFC (the canonical form could
    not tell them apart), or nesting deeper than MAX_DEPTH. Never a RecursionError."""
    try:
        _check(value, MAX_DEPTH)
    except _Refused as refused:
        where = path + "".join(reversed(refused.where))
        raise NotSerializable(where, refused.value, refused.reason) from None
    return value


class _Refused(Exception):
    """A part `validated` refuses; `where` collects the path's segments, innermost first, as
    the walk unwinds (the path is built only for a refusal, never per part)."""

    def __init__(self, value: Any, reason: str | None = None) -> None:
        self.value = value
        self.reason = reason
        self.where: list[str] = []


def _check(value: Any, room: int) -> None:
    """`validated`'s walk; `room`: how many more levels of containers may open here."""
    if isinstance(value, str):
        reason = text_refusal(value)
        if reason is not None:
            raise _Refused(value, reason)
    elif value is None or isinstance(value, bool):
        return
    elif isinstance(value, int):
        if value.bit_length() > _SHORT_INT_BITS:
            try:
                str(value)
            except ValueError:
                raise _Refused(value, "an integer too long to write") from None
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise _Refused(value)
    elif not isinstance(value, (dict, list)):
        raise _Refused(value)
    elif room < 1:
        raise _Refused(value, f"nested deeper than {MAX_DEPTH} levels")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            kind = type(item)
            # The common parts pass here, without a call (`_check`'s own tests, exact types).
            if (
                (kind is str and item.isascii() and "\x00" not in item)
                or (kind is int and item.bit_length() <= _SHORT_INT_BITS)
                or item is None
                or kind is bool
            ):
                continue
            try:
                _check(item, room - 1)
            except _Refused as refused:
                refused.where.append(f"[{index}]")
                raise
    else:
        _check_object(value, room)


def _check_object(value: dict[Any, Any], room: int) -> None:
    ascii_keys = True
    for key, item in value.items():
        if type(key) is str and key.isascii() and "\x00" not in key:
            pass  # `text_refusal`'s common case, without the call
        elif not isinstance(key, str):
            refused = _Refused(key)
            refused.where.append(f".<key {key!r}>")
            raise refused
        elif (reason := text_refusal(key)) is not None:
            refused = _Refused(key, reason)
            refused.where.append(f".<key {key!r}>")
            raise refused
        else:
            ascii_keys = ascii_keys and key.isascii()
        kind = type(item)
        # As in `_check`'s lists: the common parts pass without a call.
        if (
            (kind is str and item.isascii() and "\x00" not in item)
            or (kind is int and item.bit_length() <= _SHORT_INT_BITS)
            or item is None
            or kind is bool
        ):
            continue
        try:
            _check(item, room - 1)
        except _Refused as inner:
            inner.where.append(f".{key}")
            raise
    if not ascii_keys:
        seen: set[str] = set()
        for key in value:
            normal = unicodedata.normalize("NFC", key)
            if normal in seen:
                refused = _Refused(key, "is the same key as another one in Unicode NFC")
                refused.where.append(f".<key {key!r}>")
                raise refused
            seen.add(normal)


def output_checked(value: Any, *, path: str, failure: type[StepFailure], source: str) -> Any:
    """What the world sent (a model's reply, a tool's result), if `validated` passes it; else
    `failure` of kind output_invalid, naming the path and the reason ("`source` cannot be
    stored: path: reason"). The one rule for untrusted output: it fails its step with the
    reason recorded, never the worker."""
    try:
        return validated(value, path)
    except NotSerializable as exc:
        raise failure(
            f"{source} cannot be stored: {exc}", kind=FailureKind.OUTPUT_INVALID
        ) from None


def _normalized(value: Any) -> Any:
    """The canonical form of `value`: `value` itself (the same object) when nothing in it
    changes, so a caller can tell that its canonical JSON is also its exact JSON."""
    if isinstance(value, str):
        # Returns `value` itself when it is already NFC (always, for ASCII).
        return unicodedata.normalize("NFC", value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        normalized: dict[Any, Any] = {}
        unchanged = True
        for key, item in value.items():
            # An ASCII str is NFC already (`normalize` would return it): no call for it.
            new_key = (
                key if type(key) is str and key.isascii() else unicodedata.normalize("NFC", key)
            )
            kind = type(item)
            # ASCII strs, ints and None are their own normal form (`_normalized` returns them
            # as they are): no call for them.
            if (kind is str and item.isascii()) or kind is int or item is None:
                new = item
            else:
                new = _normalized(item)
            normalized[new_key] = new
            unchanged = unchanged and new_key is key and new is item
        if len(normalized) != len(value):
            # Two keys equal in NFC would collapse into one and drop a value from the digest.
            raise ValueError("two object keys are the same string in Unicode NFC form")
        return value if unchanged else normalized
    if isinstance(value, list):
        items: list[Any] = []
        unchanged = True
        for item in value:
            kind = type(item)
            if (kind is str and item.isascii()) or kind is int or item is None:
                new = item  # as in objects
            else:
                new = _normalized(item)
            items.append(new)
            unchanged = unchanged and new is item
        return value if unchanged else items
    if isinstance(value, tuple):
        return [_normalized(v) for v in value]
    return value


def _encoder(*, sort_keys: bool) -> json.JSONEncoder:
    # The encoder `json.dumps` makes for these options on every call, made once: its `encode`
    # writes the same text.
    return json.JSONEncoder(
        sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


_ENCODERS = {True: _encoder(sort_keys=True).encode, False: _encoder(sort_keys=False).encode}


def _dumps(value: Any, *, sort_keys: bool = True) -> str:
    """json's compact text, non-ASCII kept, no NaN (`json.dumps` with those options): the one
    json writer here."""
    return _ENCODERS[sort_keys](value)


# A value with at most this many parts (containers and scalars) may go to orjson.
_FEW_PARTS = 64
# Ints orjson and json write alike (json refuses an int of over 4,300 digits).
_INT_RANGE = range(-(2**63), 2**64)


def json_bytes(value: Any, *, sort_keys: bool = True) -> bytes:
    """`json.dumps(value, sort_keys=sort_keys)`, compact, non-ASCII kept, no NaN, as UTF-8 bytes.

    A value of few plain parts (`_plain_copy`) is written by orjson instead: the same bytes
    (its string escaping is json's; property-tested) in a fraction of the time on long strings
    (0.05 against 0.66 ms for 500 KB; pydantic-core's `to_json`, used before, 0.3 ms). Anything
    else, and what orjson cannot encode (a lone surrogate), goes through json."""
    plain = _plain_copy(value, [_FEW_PARTS], sort_keys=sort_keys)
    if plain is not _NOT_PLAIN:
        try:
            return orjson.dumps(plain)
        except orjson.JSONEncodeError:
            pass
    return _dumps(value, sort_keys=sort_keys).encode()


def json_parsed(text: str) -> Any:
    """`json.loads(text)`: the same value, or a ValueError where json fails.

    pydantic-core parses it first (0.04 against 0.3 ms for 500 KB of text): where it returns a
    value, it is the one json returns (property-tested: numbers, escapes, duplicate keys,
    NaN). What it refuses, json decides: json takes a lone surrogate (`"\\ud800"`) and nesting
    deeper than 200, and raises its own error for the rest. Nesting too deep for json itself
    (a RecursionError) is a ValueError too: text that cannot be read, like any other."""
    try:
        return pydantic_core.from_json(text)
    except (ValueError, TypeError):
        try:
            return json.loads(text)
        except RecursionError:
            raise ValueError("JSON nested too deeply to read") from None


_NOT_PLAIN = object()


def _plain_copy(value: Any, budget: list[int], *, sort_keys: bool) -> Any:
    """A copy of `value` (keys sorted when `sort_keys`) that orjson writes exactly as json
    does, or _NOT_PLAIN when `value` has more parts than `budget` or a part of another kind
    than: a dict with str keys, a list, a str, a bool, None, an int in `_INT_RANGE`, or a
    finite float that json writes without an exponent (orjson writes 1e-7 where json
    writes 1e-07). Exact types only: a subclass may serialize differently."""
    budget[0] -= 1
    kind = type(value)
    if budget[0] < 0:
        return _NOT_PLAIN
    if kind is str or kind is bool or value is None:
        return value
    if kind is int:
        return value if value in _INT_RANGE else _NOT_PLAIN
    if kind is float:
        return value if math.isfinite(value) and "e" not in repr(value) else _NOT_PLAIN
    if kind is list:
        if len(value) > budget[0]:
            return _NOT_PLAIN
        items: list[Any] = []
        for item in value:
            part = type(item)
            # A str, a bool or None is copied as it is, without a call (one part of `budget`).
            if part is str or part is bool or item is None:
                budget[0] -= 1
            else:
                item = _plain_copy(item, budget, sort_keys=sort_keys)
                if item is _NOT_PLAIN:
                    return _NOT_PLAIN
            items.append(item)
        return _NOT_PLAIN if budget[0] < 0 else items
    if kind is dict and len(value) <= budget[0]:
        for key in value:
            if type(key) is not str:
                return _NOT_PLAIN
        copy: dict[str, Any] = {}
        for key in sorted(value) if sort_keys else value:
            item = value[key]
            part = type(item)
            if part is str or part is bool or item is None:
                budget[0] -= 1  # as in lists
            else:
                item = _plain_copy(item, budget, sort_keys=sort_keys)
                if item is _NOT_PLAIN:
                    return _NOT_PLAIN
            copy[key] = item
        return _NOT_PLAIN if budget[0] < 0 else copy
    return _NOT_PLAIN


def canonical_json(value: Any) -> str:
    """Sorted keys, NFC strings, integral floats as ints, no whitespace: stable across processes."""
    return _dumps(_normalized(value))


@dataclass(frozen=True)
class Encoded:
    """A value serialized once. `data`: JSON bytes with sorted keys; `exact`: they read back as
    the value itself (an artifact of the value can store them). `encoded` gives the canonical
    bytes (then `sha256` is the value's digest), `exact_json` the value's own."""

    data: bytes
    exact: bool

    @functools.cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


def encoded(value: Any) -> Encoded:
    normal = _normalized(value)
    return Encoded(json_bytes(normal), exact=normal is value)


def exact_json(value: Any) -> Encoded:
    """The bytes an artifact of `value` stores (it must be valid JSON: see `validated`)."""
    return Encoded(json_bytes(value), exact=True)


def digest(value: Any) -> str:
    return encoded(value).sha256


def offloaded(
    value: Any,
    *,
    path: str,
    task_id: int | None,
    create: Callable[[str, int, str], int] | None = None,
    syncs: Syncs | None = None,
    known: Encoded | None = None,
    inline: Callable[[Any, bytes], None] | None = None,
    checked: bool = False,
) -> Any:
    """Validate `value` (unless `checked`: it equals a value `validated` passed, e.g. a tool's
    result or a model's proposal as checked when received); if its JSON is above the artifact
    threshold, store it and return a pointer.

    The pointer is `{"$artifact": id, "size": bytes, "sha256": hex}`. Small values come back as is.
    The value is serialized once (`known`, its `encoded` form, is reused when given: its
    canonical bytes are the file when exact); size, digest and file come from those bytes. An
    artifact holds the value's JSON with sorted keys (jsonb keeps no key order either). Files
    are named by content (per task): a value already stored is not written again.
    `create(name, size, sha256)` records the artifact's row and returns its id (a commit
    inserts it with its own statement; by default an ORM INSERT in the caller's transaction).
    With `syncs` (a commit's), the file's fsync starts on a thread and its directory is added
    to them, for the commit to wait for before its statement, instead of both being fsynced
    here. `inline` is given a value that stays in the row, with its JSON (a commit sends those
    bytes rather than serializing the value again).
    """
    if not checked:
        validated(value, path)
    if isinstance(value, (bool, int, float)) or value is None:
        return value
    if known is None or not known.exact:
        known = exact_json(value)
    data = known.data
    # Data shaped like a pointer is stored too, so `loaded` only ever resolves pointers made here
    # (a hostile tool result could otherwise name another task's artifact).
    if len(data) <= settings.AGENTOPS["ARTIFACT_THRESHOLD_BYTES"] and not is_pointer(value):
        if inline is not None:
            inline(value, data)
        return value
    sha = known.sha256
    name, directory = _stored(f"artifacts/{task_id or 'none'}/{sha}.json", data, syncs)
    if directory is not None:
        if syncs is None:
            fsync_directory(directory)
        else:
            syncs.directories.add(directory)
    if create is None:
        artifact_id = _artifact_create(task_id, name, len(data), sha)
    else:
        artifact_id = create(name, len(data), sha)
    return {ARTIFACT_KEY: artifact_id, "size": len(data), "sha256": sha, "path": path}


def _artifact_create(task_id: int | None, name: str, size: int, sha256: str) -> int:
    from agentops.models import Artifact

    return Artifact.objects.create(task_id=task_id, name=name, size=size, sha256=sha256).pk


def _stored(name: str, data: bytes, syncs: Syncs | None = None) -> tuple[str, str | None]:
    """Store `data` under `name` (or, when a different file has that name, a new one), durable
    before its pointer commits, so a power loss cannot leave a committed pointer to a missing
    file: fsynced here, or by `syncs` (the commit's, which waits for it before its statement).
    Returns the name and the local directory whose entries must be fsynced before that commit
    (None for remote storages, S3-compatible ones, durable when their write returns)."""
    if default_storage.__class__ is not FileSystemStorage:
        if not (default_storage.exists(name) and default_storage.size(name) == len(data)):
            name = default_storage.save(name, ContentFile(data))
        return name, None
    path = default_storage.path(name)
    try:
        handle = _created(path)
    except FileExistsError:
        directory = os.path.dirname(path)
        new_directory = not os.path.isdir(directory)
        if new_directory or os.path.getsize(path) != len(data):
            # A new directory (the storage makes it, with its modes), or a file cut short by a
            # crash (it has another size: the storage saves under a new name).
            name = default_storage.save(name, ContentFile(data))
            path = default_storage.path(name)
        if new_directory:
            fsync_directory(os.path.dirname(directory))
        if syncs is not None and syncs.has(path):
            return name, os.path.dirname(path)  # this commit stored it already
        # A file reused by content is fsynced too: the commit that wrote it may have died
        # before its fsync.
        handle = os.open(path, os.O_RDONLY)
    else:
        # Written and fsynced through the handle that created it: nothing is read back.
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(handle, view) :]
        except BaseException:
            os.close(handle)
            os.unlink(path)
            raise
    if syncs is not None:
        syncs.file(path, handle)
        return name, os.path.dirname(path)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)
    return name, os.path.dirname(path)


def _created(path: str) -> int:
    """A new file at `path`, open for writing, with the storage's permissions; FileExistsError
    when the name is taken or the directory does not exist yet."""
    if not os.path.isdir(os.path.dirname(path)):
        raise FileExistsError(path)
    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    mode = cast(FileSystemStorage, default_storage).file_permissions_mode
    if mode is not None:
        os.fchmod(handle, mode)
    return handle


def is_pointer(value: Any) -> bool:
    return isinstance(value, dict) and ARTIFACT_KEY in value


def loaded(value: Any) -> Any:
    """Resolve an artifact pointer (verifying its sha256); any other value comes back as is."""
    from agentops.models import Artifact

    if not is_pointer(value):
        return value
    artifact = Artifact.objects.get(pk=value[ARTIFACT_KEY])
    if value.get("sha256") != artifact.sha256:
        raise ValueError(f"artifact {artifact.pk}: the pointer does not match the artifact")
    with default_storage.open(artifact.name, "rb") as handle:
        data = handle.read()
    if hashlib.sha256(data).hexdigest() != artifact.sha256:
        raise ValueError(f"artifact {artifact.pk}: sha256 mismatch")
    return json_parsed(data.decode())
