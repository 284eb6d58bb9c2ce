"""The job table: room for INFO beside long ids, live retry timers, durations of killed jobs."""

from __future__ import annotations

import console_fakes
import pytest
from console_fakes import FakeClient
from console_helpers import fake_app, loaded, screen_text, wait_for

from tui.app import ConsoleApp
from tui.screens.job_detail import JobDetailScreen
from tui.widgets.job_table import JobTable
from wloadctl.core.states import JobState

LONG_ID = "nightly_reconciliation_" + "x" * 177


@pytest.fixture
def long_id_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """The canned plan with one more job, whose id is 200 characters long."""
    monkeypatch.setattr(console_fakes, "PLAN_TEXT",
                        console_fakes.PLAN_TEXT + f'  {LONG_ID}: {{command: "sleep 1"}}\n')
    monkeypatch.setitem(console_fakes.ROWS, LONG_ID, (JobState.WAITING, 0, -1, None, None, None, ""))


@pytest.mark.usefixtures("long_id_plan")
async def test_a_200_character_id_leaves_info_on_screen_at_80_columns() -> None:
    app = fake_app(FakeClient())
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        text = screen_text(app)
        assert "INFO" in text
        rows = [line for line in text.splitlines() if "load_fx_rates" in line and "FAIL" in line]
        assert rows and "exit" in rows[0], text
        app.screen.query_one("JobTable").focus()
        await pilot.press("G")
        assert "nightly_reconcil" in screen_text(app) and "~" in screen_text(app)


@pytest.fixture
def retrying(monkeypatch: pytest.MonkeyPatch) -> None:
    """load_fx_rates failed at NOW - 14 s and waits 60 s for its retry 1/3."""
    monkeypatch.setitem(console_fakes.ROWS, "load_fx_rates",
                        (JobState.RETRY_WAIT, 1, 0, 3, 700.0, 740.0, "exit status 3; retry 1/3 in 60.0s"))


class RetryRowClient(FakeClient):
    """Rows as the journal has them: a job waiting for its retry has no end (its history has the wait)."""

    def job_rows(self) -> list[tuple]:
        return [(*r[:7], None, r[8]) if r[1] == "load_fx_rates" else r for r in super().job_rows()]


@pytest.mark.usefixtures("retrying")
@pytest.mark.parametrize("source", ["row", "replayed", "history"])
async def test_the_retry_countdown_moves_with_the_clock(source: str) -> None:
    fake = RetryRowClient() if source == "history" else FakeClient()
    if source == "replayed":
        # The feed also replays the move to RETRY_WAIT (from RUNNING, when the attempt stopped).
        k = fake.ids_list.index("load_fx_rates")
        fake.transitions = [(*t[:2], int(JobState.RUNNING), *t[3:]) if t[1] == k else t for t in fake.transitions]
    clock = [console_fakes.NOW]
    app = ConsoleApp(fake.state_dir, open_client=lambda: fake, clock=lambda: clock[0], poll=0.02)
    async with app.run_test(size=(130, 30)) as pilot:
        await loaded(pilot)

        def row() -> str:
            return next(ln for ln in screen_text(app).splitlines() if "load_fx_rates" in ln)

        assert "retry 1/3 in 46s; exit status 3" in row()
        # When 20 s pass without any transition
        clock[0] += 20
        await wait_for(pilot, lambda: "retry 1/3 in 26s" in row(), 5, "the countdown")
        clock[0] += 30
        await wait_for(pilot, lambda: "retry 1/3 due now" in row(), 5, "the retry due")


@pytest.mark.usefixtures("retrying")
async def test_a_job_waiting_for_its_retry_shows_how_long_its_attempt_ran_and_when_it_ended() -> None:
    # Given the console following load_fx_rates from RUNNING (started T0+700) to RETRY_WAIT at T0+740, its
    # row without an end (as the journal's is)
    fake = RetryRowClient()
    k = fake.ids_list.index("load_fx_rates")
    fake.transitions = [(*t[:2], int(JobState.RUNNING), *t[3:]) if t[1] == k else t for t in fake.transitions]
    app = fake_app(fake)
    async with app.run_test(size=(130, 30)) as pilot:
        await loaded(pilot)
        # Then its row has the attempt's duration beside its start
        row = next(ln for ln in screen_text(app).splitlines() if "load_fx_rates" in ln)
        assert " 40s " in row, row
        # And so has its detail, with when the attempt ended
        assert app.screen.query_one(JobTable).select_job("load_fx_rates")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, JobDetailScreen), 5, "the detail")
        await pilot.pause(0.1)
        line = next(ln for ln in screen_text(app).splitlines() if "started " in ln)
        assert "took 40s" in line and "ended -" not in line, line
