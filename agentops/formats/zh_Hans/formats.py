"""Simplified Chinese dates and times as the pages write them: 2026年12月7日 18:25, a 24-hour clock
(CLDR's zh pattern). Django's own `zh_Hans` formats fill in the rest."""

from __future__ import annotations

SHORT_DATE_FORMAT = "Y年n月j日"
SHORT_DATETIME_FORMAT = "Y年n月j日 H:i"
DATETIME_FORMAT = "Y年n月j日 H:i:s T"
