"""English dates and times as the pages write them: ISO order, 24-hour clock (the operators'
habit, and the order logs and the API use). Django's own `en` formats fill in the rest."""

from __future__ import annotations

SHORT_DATE_FORMAT = "Y-m-d"
SHORT_DATETIME_FORMAT = "Y-m-d H:i"
# With seconds and the time zone, where the exact moment is the point (the decision log, stamps).
DATETIME_FORMAT = "Y-m-d H:i:s T"
