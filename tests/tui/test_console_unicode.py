"""Text in any script on the console: a plan name, hold reasons and operator names in French, Japanese and emoji
show as written, and where they are cut the cut counts terminal columns (a CJK character or an emoji takes two)."""

from __future__ import annotations

from typing import Any

import console_fakes
import pytest
from console_fakes import FakeClient, Run
from console_helpers import fake_app, loaded, screen_text, wait_for
from rich.cells import cell_len

from tui.screens.job_detail import JobDetailScreen
from tui.widgets.job_table import JobTable
from wloadctl.core.states import JobState

PLAN_NAME = "日本の夜間バッチ処理システム全体の勘定系締め処理と規制当局向け報告書の作成"
"""A plan name of 37 CJK characters (111 bytes): 74 columns, nearly the whole line."""
REASON = "held by rené: 日本語の理由がとても長くて列に収まらない🚀🚀"


@pytest.fixture
def held_in_japanese(monkeypatch: pytest.MonkeyPatch) -> None:
    """limits_check is held with a reason in Japanese, wider than the INFO column."""
    monkeypatch.setitem(console_fakes.ROWS, "limits_check",
                        (JobState.HELD, 0, -1, None, None, None, REASON))


@pytest.mark.usefixtures("held_in_japanese")
async def test_a_cjk_plan_name_and_hold_reason_are_cut_by_columns_at_80x24() -> None:
    app = fake_app(FakeClient(run=Run(plan_name=PLAN_NAME)))
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        lines = screen_text(app).splitlines()
        # The name is cut to half the line, so the scheduler's state still shows after it
        head = lines[0]
        assert head.startswith(" 日本の夜間バッチ") and "~" in head and "pid 4242" in head, head
        assert cell_len(head.split("~")[0]) <= 40, head
        # The reason fills INFO to the border and says it was cut: the border stays in its column
        row = next(ln for ln in lines if "limits_check" in ln)
        assert "held by rené: 日本語" in row and row.endswith("|") and row[:-1].rstrip().endswith("~"), row
        assert cell_len(row) == 80, row


class _Actions(FakeClient):
    """A canned client whose history holds an operator's hold, by a user and for a reason in other scripts."""

    def history(self, job: str) -> dict[str, Any]:
        out = super().history(job)
        out["actions"] = [{"ts": console_fakes.NOW - 60, "user": "søren", "verb": "hold",
                           "reason": "attente de la Société 日本 🚀", "applied": True,
                           "outcome": f"job '{job}' held"}]
        return out


@pytest.mark.usefixtures("held_in_japanese")
async def test_the_job_detail_shows_the_reason_and_the_operator_as_written() -> None:
    app = fake_app(_Actions())
    async with app.run_test(size=(100, 40)) as pilot:
        await loaded(pilot)
        app.screen.query_one(JobTable).select_job("limits_check")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, JobDetailScreen) and app.screen.history,
                       what="the history")
        await pilot.pause()
        text = screen_text(app)
        assert "søren hold (attente de la Société 日本 🚀): applied" in text, text
