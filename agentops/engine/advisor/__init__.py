"""The recovery advisor: what a person should do with a stopped task, and what each choice does.

Pure Python (no ORM, no settings): `advise` maps a failure (layer, kind), the failed step's
side-effect risk, the task's progress and its counters to one recommended intervention with a
one-line rationale, by the first matching row of `RULES`, the one table of this policy (rendered in
docs/recovery.md). `preview` says, for retry / skip / rollback / abort, which steps run, which
effects get compensated (in reverse order) and which stay because nothing can undo them.

One module per part: `situation` (what is weighed), `rules` (the table), `advice` (the
recommendation and the options) and `previews` (the views of steps and ledger rows, what each
option does, and the situation they make). Import from here: these are the advisor's names.
"""

from __future__ import annotations

from agentops.engine.advisor.advice import Recommendation as Recommendation
from agentops.engine.advisor.advice import advise as advise
from agentops.engine.advisor.advice import options_for as options_for
from agentops.engine.advisor.previews import STEP_DONE as STEP_DONE
from agentops.engine.advisor.previews import LedgerView as LedgerView
from agentops.engine.advisor.previews import Preview as Preview
from agentops.engine.advisor.previews import StepView as StepView
from agentops.engine.advisor.previews import preview as preview
from agentops.engine.advisor.previews import situation_from as situation_from
from agentops.engine.advisor.rules import RULES as RULES
from agentops.engine.advisor.rules import Rule as Rule
from agentops.engine.advisor.situation import AUTO_RETRIED as AUTO_RETRIED
from agentops.engine.advisor.situation import EARLY_BELOW as EARLY_BELOW
from agentops.engine.advisor.situation import KINDS as KINDS
from agentops.engine.advisor.situation import LATE_FROM as LATE_FROM
from agentops.engine.advisor.situation import RESTARTABLE as RESTARTABLE
from agentops.engine.advisor.situation import RISK_BY_SIDE_EFFECT as RISK_BY_SIDE_EFFECT
from agentops.engine.advisor.situation import SKIPPABLE as SKIPPABLE
from agentops.engine.advisor.situation import TRANSIENT as TRANSIENT
from agentops.engine.advisor.situation import Action as Action
from agentops.engine.advisor.situation import Band as Band
from agentops.engine.advisor.situation import Risk as Risk
from agentops.engine.advisor.situation import Situation as Situation
from agentops.engine.advisor.situation import band_of as band_of
from agentops.engine.advisor.situation import risk_of as risk_of
