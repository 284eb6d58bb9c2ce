"""What a job's payload carries of its checkpoint: the token a previous attempt left, and none before any attempt."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import make_plan
from wloadctl.procs.runctx import EventLog, RunContext
from wloadctl.store import Store


def _ctxs(tmp_path: Path, *epochs: int) -> list[RunContext]:
    """Contexts of one run for schedulers of these epochs."""
    plan = make_plan({"a": {}}, name="t")
    sd = tmp_path / "sd"
    store = Store.open(sd)
    run = store.create_run("r1", "t", "p.yaml", "d", "", ["a"], "2026-01-01", 1.0)
    store.close()
    return [RunContext(run, plan, sd, e, EventLog(sd / f"events-{e}.jsonl", "r1")) for e in epochs]


def test_a_retry_gets_the_checkpoint_back_and_a_first_attempt_looks_for_none(tmp_path: Path) -> None:
    (ctx,) = _ctxs(tmp_path, 1)
    spec = ctx.plan.jobs["a"]
    first = ctx.payload(spec, 1)
    Path(first.env["WLOADCTL_CHECKPOINT_FILE"]).write_text("chunk-7\n")
    # The first attempt under the run's first scheduler: nothing can have written one before it
    assert ctx.payload(spec, 1).env["WLOADCTL_CHECKPOINT"] == ""
    # A retry gets what the attempt before it wrote
    assert ctx.payload(spec, 2).env["WLOADCTL_CHECKPOINT"] == "chunk-7"
    ctx.events.close()


def test_after_a_resume_even_a_first_attempt_gets_the_checkpoint_back(tmp_path: Path) -> None:
    # A scheduler that took the run over (epoch 2) may send attempt 1 again: whatever it wrote is passed on
    ctx, later = _ctxs(tmp_path, 1, 2)
    Path(ctx.payload(ctx.plan.jobs["a"], 1).env["WLOADCTL_CHECKPOINT_FILE"]).write_text("chunk-9")
    assert later.payload(later.plan.jobs["a"], 1).env["WLOADCTL_CHECKPOINT"] == "chunk-9"
    ctx.events.close()
    later.events.close()
