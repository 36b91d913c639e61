from __future__ import annotations

from django.apps import AppConfig


class AgentopsConfig(AppConfig):
    name = "agentops"
    verbose_name = "Agent operations"

    def ready(self) -> None:
        # Before the request handler loads its middleware: tracing the web tier adds one.
        from agentops.plumbing import tracing

        tracing.configure()

        from agentops.permissions import PERMISSIONS
        from agentops.plumbing.web import permissions_register

        permissions_register(PERMISSIONS)

        # Agents and tools register themselves on import: the shipped ones, then other installed
        # packages', each named by an entry point of the group `agentops.agents` (a module that
        # fails to load stops the process here, naming its distribution). The policy engine
        # learns of them (and of the recorded steps dry-runs replay) through its catalog, since
        # policies imports no app.
        from agentops import policy_hooks
        from agentops.engine.entrypoints import agent_packages_load
        from agentops.engine.gates import gate_decision_seconds

        agent_packages_load()
        # `check --deploy` names the agents this deployment cannot run, and what it lacks.
        from agentops import checks  # noqa: F401

        policy_hooks.register(decision_seconds=gate_decision_seconds)

        from agentops import metrics
        from agentops.plumbing import prometheus

        prometheus.collector_register("agentops.tasks", metrics.tasks_state_metrics)
        prometheus.collector_register("agentops.queue", prometheus.queue_metrics)

        from agentops.engine.children import parents_wake_stranded
        from agentops.engine.sweeper import sweep_hook_register

        sweep_hook_register(parents_wake_stranded)
