"""The pure core: plan model, plan loading, DAG analysis, and the scheduling engine."""

from __future__ import annotations

from wloadctl.core.dag import Dag
from wloadctl.core.plan import JobSpec, Plan, RetryPolicy
from wloadctl.core.planfile import load_plan, load_plan_text

__all__ = ["Dag", "JobSpec", "Plan", "RetryPolicy", "load_plan", "load_plan_text"]
