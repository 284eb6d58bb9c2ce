"""The console's readouts: DAG labels and connectors, the header's estimate, the timeline title, durations."""

from __future__ import annotations

import re
from collections.abc import Iterator

import console_fakes
import pytest
from console_helpers import fake_app, loaded, screen_text, wait_for

from tui.widgets.job_table import JobTable

CENTRE = "s01_calendar_check_000002"
SIBLINGS = ("s02_fx_rates_000715", "s02_fx_rates_000724", "s02_fx_rates_000763")


@pytest.fixture
def bank_ids(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The canned run with generated-plan ids: load_gl's dependents differ only in their last digits."""
    rename = {
        "extract_core": "s00_open_day_000000",
        "extract_cards": "s00_open_day_000001",
        "load_gl": CENTRE,
        "post_interest": SIBLINGS[0],
        "revalue_fx": SIBLINGS[1],
        "limits_check": SIBLINGS[2],
    }
    text = console_fakes.PLAN_TEXT
    for old, new in rename.items():
        text = re.sub(rf"\b{old}\b", new, text)
    rows = {rename.get(k, k): v for k, v in console_fakes.ROWS.items()}
    monkeypatch.setattr(console_fakes, "PLAN_TEXT", text)
    monkeypatch.setattr(console_fakes, "ROWS", rows)
    yield


def dag_lines(text: str) -> list[str]:
    """The DAG pane's lines (the whole width: at 200 columns it shares the line with other panes)."""
    lines = text.splitlines()
    top = next(n for n, line in enumerate(lines) if "1 dag:" in line)
    return lines[top + 1 : top + 1 + next(
        n for n, line in enumerate(lines[top + 1 :]) if "critical-path place" in line or "levels" in line
    )]


@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
@pytest.mark.parametrize("levels", [1, 2])
async def test_dag_labels_of_siblings_stay_distinct_and_connectors_are_clean(
    bank_ids: None, size: tuple[int, int], levels: int
) -> None:
    app = fake_app()
    async with app.run_test(size=size) as pilot:
        await loaded(pilot)
        table = app.screen.query_one(JobTable)
        for _ in range(10):
            if table.current_job == CENTRE:
                break
            await pilot.press("j")
        assert table.current_job == CENTRE
        await pilot.press("1")
        if levels == 2:
            await pilot.press("plus")
        await pilot.pause(0.1)
        text = screen_text(app)
        assert f"levels {levels} " in text, text
        lines = dag_lines(text)
        labels = [
            m.group(1)
            for line in lines
            for m in re.finditer(r">(?:OK|WAIT|UPFAIL|HELD|RUN|FAIL) (\S+?)[ |*-]", line)
        ]
        assert len(labels) == len(set(labels)), "\n".join(lines)
        for job in SIBLINGS:  # the digits that tell them apart are kept
            assert any(lab.endswith(job[-3:]) for lab in labels), (job, labels)
        for line in lines:  # every line reaches its arrow; a passing vertical never cuts it
            assert "|>" not in line and "|-" not in line, "\n".join(lines)


async def test_the_header_says_it_cannot_tell_the_time_to_go_without_expected_durations() -> None:
    app = fake_app()
    async with app.run_test(size=(120, 24)) as pilot:
        await loaded(pilot)
        text = screen_text(app)
        assert "? to go" in text and "~" not in text.splitlines()[0], text.splitlines()[0]


async def test_the_header_counts_a_running_job_against_its_history() -> None:
    class LongGl(console_fakes.FakeClient):
        def expected_history(self) -> dict[str, float]:
            return {"load_gl": 7200.0}  # it ran 564 s of a two-hour history; 3 s of work follow

    app = fake_app(LongGl())
    async with app.run_test(size=(120, 24)) as pilot:
        await loaded(pilot)
        assert "~1h50m to go" in screen_text(app).splitlines()[0]


@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
async def test_the_timeline_shows_the_counts_of_the_moment_at_80_columns(size: tuple[int, int]) -> None:
    from tui.screens.timeline import TimelineScreen

    class Journaled(console_fakes.FakeClient):
        def timeline(self) -> list[float]:
            return [console_fakes.NOW - 60.0 * k for k in range(13899, -1, -1)]

        def job_rows_at(self, when: float) -> list[tuple]:
            return self.job_rows()

    app = fake_app(Journaled())
    async with app.run_test(size=size) as pilot:
        await loaded(pilot)
        await pilot.press("T")
        await wait_for(pilot, lambda: isinstance(app.screen, TimelineScreen) and app.screen.model is not None)
        await pilot.pause()
        top = "\n".join(screen_text(app).splitlines()[:2])
        assert "event 13900 of 13900" in top, top
        for count in ("SUCCEEDED 3", "RUNNING 2", "FAILED 1", "UPSTREAM_FAILED 1", "HELD 1", "WAITING 6"):
            assert count in top, top


async def test_a_killed_job_skipped_later_shows_its_attempts_duration_when_loaded_from_the_journal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given extract_fx started at +3 s, was killed at +39 s and skipped at +125 s (its row ends at the skip)
    t0 = console_fakes.T0
    rows = dict(console_fakes.ROWS)
    rows["extract_fx"] = (console_fakes.S.SKIPPED, 1, 0, -9, 3.0, 125.0, "skipped by ops")
    monkeypatch.setattr(console_fakes, "ROWS", rows)

    def step(frm: str, to: str, at: float) -> dict[str, object]:
        return {"from": frm, "to": to, "attempt": 1, "ts": t0 + at, "executor": 0, "exit_code": None,
                "reason": "", "cause": "c"}

    class Journaled(console_fakes.FakeClient):
        def actions(self) -> list[dict[str, object]]:
            return [{"ts": t0 + 39.0, "user": "ops", "verb": "kill", "job": "extract_fx", "reason": "",
                     "outcome": "", "applied": True},
                    {"ts": t0 + 125.0, "user": "ops", "verb": "skip", "job": "extract_fx", "reason": "",
                     "outcome": "", "applied": True}]

        def history(self, job: str) -> dict[str, object]:
            if job != "extract_fx":
                return super().history(job)
            moves = [step("READY", "QUEUED", 2.0), step("QUEUED", "RUNNING", 3.0),
                     step("RUNNING", "FAILED", 39.0), step("FAILED", "SKIPPED", 125.0)]
            return {"job": job, "state": "SKIPPED", "attempts": 1, "transitions": moves, "actions": []}

    # When the console opens on the run
    app = fake_app(Journaled())
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await pilot.pause()
        # Then its DUR is the 36 s its attempt ran, not the 2m02s to the skip
        row = next(line for line in screen_text(app).splitlines() if "extract_fx" in line)
        assert " 36s " in row and "2m02s" not in row, row
