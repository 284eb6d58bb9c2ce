"""The plan of a recorded run: from the journal's encoded form, else by parsing the stored text."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

from wloadctl.core.loops import apply_expansions
from wloadctl.core.plan import Plan
from wloadctl.core.plancodec import decode_plan, encode_plan
from wloadctl.errors import PlanError, StoreError, WloadError
from wloadctl.store import RunRow, Store

__all__ = ["keep_plan", "run_plan"]


def run_plan(store: Store, run: RunRow) -> Plan:
    """The plan of a run as loaded at its start (or as accepted on a resume), with the loop instances it made."""
    blob = store.plan_blob(run.id)
    plan = decode_plan(blob) if blob else None
    if plan is None:
        from wloadctl.core.planfile import load_plan_text

        text = store.plan_text(run.id)
        try:
            plan = load_plan_text(text, run.plan_path) if text else _plan_file(run)
        except PlanError as e:
            if not text:
                raise  # the plan file itself, read as such
            # The journal's copy was valid when it was written: it is the journal that is damaged, not the file.
            raise StoreError(f"the copy of the plan of run {run.run_id} in the journal {store.where} does not load: "
                             f"{e.lines(1)[0]}",
                             hint="restore the journal from a backup; the plan file is not read for it") from None
    if run.plan_path and plan.path != run.plan_path:
        # The journal's path (absolute since then) leads to the plan's folder from anywhere: relative `cwd:` too.
        plan = dataclasses.replace(plan, path=run.plan_path)
    expansions = store.expansions(run.id)
    if expansions:
        # Instances of `for_each` loops over output, in the order the run made them.
        plan = apply_expansions(plan, expansions)
    return plan


def _plan_file(run: RunRow) -> Plan:
    """The plan of a run whose journal holds no copy of it yet (a new run writes its copy after the first
    dispatch): the plan file itself, if it is still the file the run was started with."""
    from wloadctl.core.planfile import load_plan_text

    try:
        data = Path(run.plan_path).read_bytes()
    except OSError as e:
        data, why = b"", f"cannot be read ({e.strerror})"
    else:
        why = "changed since"
    if data and hashlib.sha256(data).hexdigest() == run.plan_digest:
        return load_plan_text(data.decode("utf-8", "replace"), run.plan_path)
    raise WloadError(f"the journal holds no copy of the plan of run {run.run_id} yet (its scheduler stopped before "
                     f"it wrote one), and the plan file {why}", file=run.plan_path,
                     hint="put the plan file back as the run started with it, then resume")


def keep_plan(store: Store, run: RunRow, plan: Plan) -> None:
    """Store the plan's encoded form, so resuming or watching the run skips parsing the YAML.

    A plan of one-line jobs is read again from its text about as fast as its encoded form is
    decoded (and encoding a million jobs takes seconds at the start of the run): none is kept.
    """
    if not plan.read_by_lines:
        store.set_plan_blob(run.id, encode_plan(plan))
