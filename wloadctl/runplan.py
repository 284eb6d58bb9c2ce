"""The plan of a recorded run: from the journal's encoded form, else by parsing the stored text."""

from __future__ import annotations

from wloadctl.core.loops import apply_expansions
from wloadctl.core.plan import Plan
from wloadctl.core.plancodec import decode_plan, encode_plan
from wloadctl.store import RunRow, Store

__all__ = ["keep_plan", "run_plan"]


def run_plan(store: Store, run: RunRow) -> Plan:
    """The plan of a run as loaded at its start (or as accepted on a resume), with the loop instances it made."""
    blob = store.plan_blob(run.id)
    plan = decode_plan(blob) if blob else None
    if plan is None:
        from wloadctl.core.planfile import load_plan_text

        plan = load_plan_text(store.plan_text(run.id), run.plan_path)
    expansions = store.expansions(run.id)
    if expansions:
        # Instances of `for_each` loops over output, in the order the run made them.
        plan = apply_expansions(plan, expansions)
    return plan


def keep_plan(store: Store, run: RunRow, plan: Plan) -> None:
    """Store the plan's encoded form, so resuming or watching the run skips parsing the YAML.

    A plan of one-line jobs is read again from its text about as fast as its encoded form is
    decoded (and encoding a million jobs takes seconds at the start of the run): none is kept.
    """
    if not plan.read_by_lines:
        store.set_plan_blob(run.id, encode_plan(plan))
