"""The build backend (pyproject.toml's `[build-system]`): setuptools', which first compiles the
translation catalogues (agentops/locale/*/LC_MESSAGES/django.po) into the .mo files Django reads,
so a wheel carries them and a checkout's editable install has them. The .mo files are never
committed: they are made from the .po, here or by `make translations` (which runs this file).

Babel compiles them (it reads .po and writes .mo in Python), so neither a build nor `make run`
needs GNU gettext; the catalogue's checks (every entry translated, placeholders kept) are
tests/test_translations.py's, with gettext's msgfmt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from setuptools import build_meta

# The hooks this backend leaves to setuptools as they are.
get_requires_for_build_wheel = build_meta.get_requires_for_build_wheel
get_requires_for_build_sdist = build_meta.get_requires_for_build_sdist
get_requires_for_build_editable = build_meta.get_requires_for_build_editable
prepare_metadata_for_build_wheel = build_meta.prepare_metadata_for_build_wheel
prepare_metadata_for_build_editable = build_meta.prepare_metadata_for_build_editable
build_sdist = build_meta.build_sdist

LOCALE_DIR = Path(__file__).resolve().parent.parent / "locale"


def translations_compile(locale_dir: Path = LOCALE_DIR) -> list[Path]:
    """Write each catalogue's .mo beside its .po (fuzzy entries left out, as msgfmt does)."""
    written = []
    for po_path in sorted(locale_dir.glob("*/LC_MESSAGES/*.po")):
        with po_path.open("rb") as po_file:
            catalog = read_po(po_file, locale=po_path.parent.parent.name)
        mo_path = po_path.with_suffix(".mo")
        with mo_path.open("wb") as mo_file:
            write_mo(mo_file, catalog, use_fuzzy=False)
        written.append(mo_path)
    return written


def build_wheel(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    translations_compile()
    return build_meta.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    translations_compile()
    return build_meta.build_editable(wheel_directory, config_settings, metadata_directory)


if __name__ == "__main__":
    for path in translations_compile():
        print(f"compiled {path}")
