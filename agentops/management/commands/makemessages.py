"""Django's makemessages, with msgmerge's fuzzy matching off: a new or changed string is never
given an old string's translation as a guess (a fuzzy entry the build leaves out, or worse a
wrong one someone forgets to check); it stays untranslated, so tests/test_translations.py names
it. `make messages` runs it with the project's options."""

from __future__ import annotations

from django.core.management.commands import makemessages


class Command(makemessages.Command):
    msgmerge_options = [*makemessages.Command.msgmerge_options, "--no-fuzzy-matching"]
