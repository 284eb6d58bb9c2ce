"""The job table: room for INFO beside long ids, live retry timers, durations of killed jobs."""

from __future__ import annotations

import console_fakes
import pytest
from console_fakes import FakeClient
from console_helpers import fake_app, loaded, screen_text

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
