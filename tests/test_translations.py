"""The Simplified Chinese catalogue (agentops/locale/zh_Hans/LC_MESSAGES/django.po) as the product
ships it: GNU gettext's `msgfmt --check` passes it (each translation keeps its msgid's
python-format placeholders), every entry is translated and none is fuzzy, it holds exactly the
strings marked in the code and templates (makemessages, run as `make messages` runs it, on a copy
of the tree, names what is missing or stale), and the .mo the build compiles from it is what
Django reads.

Needs GNU gettext (`.ci/run` installs it): makemessages runs xgettext and msgmerge.
"""

from __future__ import annotations

import gettext as gnu_gettext
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from babel.messages.catalog import Catalog, Message
from babel.messages.pofile import read_po
from django.utils import translation

from tests.conftest import ROOT

CATALOGUE = Path("agentops/locale/zh_Hans/LC_MESSAGES/django.po")
BUILD = ROOT / "agentops/_build/agentops_build.py"
# What a copy of the tree leaves out besides what `make messages` ignores: history, virtualenvs,
# caches and data, none of them read by makemessages.
NOT_COPIED = (".git", ".venv*", ".data", "test-artifacts", "__pycache__", "*.egg-info", ".*cache")


def catalogue(path: Path) -> Catalog:
    with path.open("rb") as po_file:
        return read_po(po_file, locale="zh_Hans")


def key(message: Message) -> str:
    """How a failure names an entry: its context (if any) and its msgid."""
    msgid = message.id if isinstance(message.id, str) else message.id[0]
    return f"{message.context}\u0004{msgid}" if message.context else msgid


def entries(path: Path) -> dict[str, Message]:
    return {key(message): message for message in catalogue(path) if message.id}


def translated(message: Message) -> bool:
    strings = message.string if isinstance(message.string, tuple) else (message.string,)
    return bool(strings) and all(strings)


def messages_ignored() -> list[str]:
    """The --ignore options of `make messages` (the Makefile's MESSAGES_IGNORE), so this test
    extracts from the same files."""
    makefile = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    found = re.search(r"^MESSAGES_IGNORE\s*:=(.*)$", makefile, re.MULTILINE)
    assert found, "the Makefile has no MESSAGES_IGNORE"
    options = shlex.split(found.group(1))
    assert options and options[::2] == ["--ignore"] * (len(options) // 2), options
    return options


def test_the_catalogue_passes_msgfmt_check_with_its_placeholders_kept(tmp_path: Path):
    made = subprocess.run(
        ["msgfmt", "--check", "-o", str(tmp_path / "django.mo"), str(ROOT / CATALOGUE)],
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    # --check compares placeholders only where an entry is flagged python-format: the entries
    # with a named placeholder must carry the flag, or a translation could drop one unnoticed.
    unflagged = [
        key(message)
        for message in catalogue(ROOT / CATALOGUE)
        if message.id
        and re.search(r"%\(\w+\)[sd]", key(message))
        and "python-format" not in message.flags
    ]
    assert unflagged == [], f"entries with placeholders not flagged python-format: {unflagged}"


def test_every_entry_is_translated_and_none_is_fuzzy():
    found = entries(ROOT / CATALOGUE)
    untranslated = [name for name, message in found.items() if not translated(message)]
    fuzzy = [name for name, message in found.items() if message.fuzzy]
    assert found, "the catalogue has no entry"
    assert untranslated == [], f"{len(untranslated)} entries untranslated: {untranslated}"
    assert fuzzy == [], f"{len(fuzzy)} fuzzy entries: {fuzzy}"


def test_the_catalogue_holds_exactly_the_strings_marked_in_the_code(tmp_path: Path):
    tree = tmp_path / "tree"
    ignored = messages_ignored()
    patterns = [*ignored[1::2], *NOT_COPIED]
    shutil.copytree(
        ROOT, tree, ignore=shutil.ignore_patterns(*(p.rstrip("/") for p in patterns)), symlinks=True
    )
    # As `make messages` runs it (its LINT_ENV: settings that need no server), in the copy: the
    # copy's manage.py imports the copy's packages, so the copy's catalogue is the one written.
    env = {
        **os.environ,
        "AGENTOPS_DEV": "1",
        "DATABASE_URL": "postgres://lint@127.0.0.1/lint",
        "REDIS_URL": "redis://127.0.0.1:6379/0",
    }
    command = [sys.executable, "manage.py", "makemessages", "--locale", "zh_Hans"]
    made = subprocess.run(
        [*command, "--no-obsolete", "--add-location", "file", *ignored],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    assert (tree / CATALOGUE).read_bytes() != b"", "makemessages wrote no catalogue"
    committed, current = entries(ROOT / CATALOGUE), entries(tree / CATALOGUE)
    missing = sorted(current.keys() - committed.keys())
    stale = sorted(committed.keys() - current.keys())
    where = {name: sorted({path for path, _ in current[name].locations}) for name in missing}
    assert missing == [], (
        f"{len(missing)} strings marked in the code are not in {CATALOGUE} (run `make messages` "
        "and translate them): "
        + "; ".join(f"{name!r} ({', '.join(where[name])})" for name in missing)
    )
    assert stale == [], f"{len(stale)} entries no string in the code marks any more: {stale}"


def test_the_mo_the_build_compiles_is_what_django_reads(tmp_path: Path):
    # The build backend's own compiler (agentops/_build is not a package: loaded by its path),
    # on a copy of the catalogue.
    spec = importlib.util.spec_from_file_location("agentops_build", BUILD)
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    locale = tmp_path / "locale"
    shutil.copytree(ROOT / "agentops/locale", locale, ignore=shutil.ignore_patterns("*.mo"))
    written = build.translations_compile(locale)
    assert written == [locale / CATALOGUE.relative_to("agentops/locale").with_suffix(".mo")]
    with written[0].open("rb") as mo_file:
        assert gnu_gettext.GNUTranslations(mo_file).gettext("Language") == "语言"
    # Django reads the catalogue the build (or `make translations`) compiled beside the .po.
    with translation.override("zh-hans"):
        assert translation.gettext("Language") == "语言"
    with translation.override("en"):
        assert translation.gettext("Language") == "Language"


@pytest.fixture(autouse=True)
def _gettext_installed() -> None:
    assert shutil.which("msgfmt") and shutil.which("xgettext"), "GNU gettext is not installed"
