"""Artifact files in PostgreSQL (agentops.storage.DatabaseStorage), through Django's storage API."""

from __future__ import annotations

import threading

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import connection
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from agentops.engine.jsonvalues import loaded, offloaded
from agentops.models import Artifact, StoredFile
from agentops.storage import DatabaseStorage

pytestmark = pytest.mark.django_db

storage = DatabaseStorage()


@pytest.fixture
def in_database(settings):  # type: ignore[no-untyped-def]
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {"BACKEND": "agentops.storage.DatabaseStorage"},
    }
    settings.AGENTOPS = {**settings.AGENTOPS, "ARTIFACT_THRESHOLD_BYTES": 100}


@hypothesis_settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=5000), name=st.from_regex(r"[a-z0-9_-]{1,40}", fullmatch=True))
def test_any_bytes_come_back_as_they_were_saved(data, name):
    saved = storage.save(f"artifacts/t/{name}.json", ContentFile(data))

    with storage.open(saved, "rb") as handle:
        assert handle.read() == data
    assert storage.exists(saved) and storage.size(saved) == len(data)
    storage.delete(saved)
    assert not storage.exists(saved)


def test_a_name_taken_with_other_bytes_is_saved_under_another_name():
    first = storage.save("artifacts/1/a.json", ContentFile(b"one"))
    second = storage.save("artifacts/1/a.json", ContentFile(b"two"))

    assert first == "artifacts/1/a.json" and second != first
    assert second.startswith("artifacts/1/a_") and second.endswith(".json")
    assert storage.open(first).read() == b"one" and storage.open(second).read() == b"two"


@pytest.mark.django_db(transaction=True)
def test_two_writers_of_the_same_bytes_under_one_name_agree_on_it():
    """The engine names artifacts by their content: whoever inserts second finds its bytes there
    and keeps the name (no exists-then-insert race leaves two names or an error)."""
    barrier = threading.Barrier(2)
    names: list[str] = []

    def write() -> None:
        barrier.wait()
        names.append(storage._save("artifacts/2/same.json", ContentFile(b"x" * 1000)))
        connection.close()

    threads = [threading.Thread(target=write) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert names == ["artifacts/2/same.json"] * 2
    assert StoredFile.objects.count() == 1


def test_a_missing_file_or_a_write_mode_is_a_clear_error():
    with pytest.raises(FileNotFoundError, match=r"artifacts/none\.json"):
        storage.open("artifacts/none.json")
    with pytest.raises(FileNotFoundError, match=r"artifacts/none\.json"):
        storage.size("artifacts/none.json")
    storage.save("artifacts/3/r.json", ContentFile(b"{}"))
    with pytest.raises(ValueError, match="read-only"):
        storage.open("artifacts/3/r.json", "wb")


def test_an_offloaded_value_lives_in_the_database_and_loads_back(in_database, tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path
    value = {"text": "é" * 400, "nested": [1, 2, {"k": None}]}

    pointer = offloaded(value, path="step.output", task_id=None)

    artifact = Artifact.objects.get(pk=pointer["$artifact"])
    stored = StoredFile.objects.get(name=artifact.name)
    assert stored.size == artifact.size == pointer["size"]
    assert loaded(pointer) == value
    assert default_storage.exists(artifact.name)
    assert not any(tmp_path.iterdir())  # nothing on the local disk
