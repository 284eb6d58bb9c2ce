"""The pure core: plan model, plan loading, DAG analysis, and the scheduling engine."""

from __future__ import annotations

from typing import Any

__all__ = ["Dag", "JobSpec", "Plan", "RetryPolicy", "load_plan", "load_plan_text"]

_WHERE = {"Dag": "dag", "JobSpec": "plan", "Plan": "plan", "RetryPolicy": "plan", "load_plan": "planfile",
          "load_plan_text": "planfile"}


def __getattr__(name: str) -> Any:
    # Lazy: `wloadctl status` imports a few small core modules and must not pay for the plan
    # loader and the YAML library at every call.
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f"wloadctl.core.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'wloadctl.core' has no attribute '{name}'")
