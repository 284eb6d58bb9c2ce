"""Four eyes in the console: a verb that only files a request says so, moot requests, keys of `A`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from console_fakes import T0, FakeClient
from console_helpers import fake_app, loaded, screen_text, wait_for
from textual.widgets import DataTable, Static

from tui.screens.confirm import ConfirmScreen
from tui.screens.pending import PendingScreen
from tui.widgets.job_table import JobTable


async def test_a_kill_under_four_eyes_says_it_only_files_a_request() -> None:
    app = fake_app(FakeClient(four_eyes=["kill"]))
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        await wait_for(pilot, lambda: app.four_eyes, what="the run's four eyes")
        app.screen.query_one(JobTable).select_job("load_gl")
        await pilot.press("x")
        screen = await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen,
                                what="the confirmation")
        said = " ".join(str(screen.query_one("#impact", Static).content).split())
        assert "they are killed now" not in said
        assert "y only files a request; nothing is done to them until another admin approves it" in said
        assert "y: request kill 1 job(s)" in str(screen.query_one("#keys", Static).content)


async def test_a_kill_without_four_eyes_says_they_are_killed_now() -> None:
    app = fake_app(FakeClient())
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        app.screen.query_one(JobTable).select_job("load_gl")
        await pilot.press("x")
        screen = await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen,
                                what="the confirmation")
        assert "they are killed now" in str(screen.query_one("#impact", Static).content)


@dataclass
class RequestsClient(FakeClient):
    """A fake run with a request to kill a running job, and one to kill a job that has since ended."""

    requests: list[dict[str, Any]] = field(default_factory=lambda: [
        {"id": "R1", "verb": "kill", "jobs": ["load_gl"], "user": "bob", "reason": "stuck",
         "ts": T0 + 600, "downstream": False},
        {"id": "R2", "verb": "kill", "jobs": ["extract_core"], "user": "bob", "reason": "slow",
         "ts": T0 + 100, "downstream": False}])

    def pending(self) -> dict[str, Any]:
        return {"run": self.run.run_id, "requests": list(self.requests), "confirm": []}


async def test_a_request_for_a_job_that_ended_is_moot_not_counted() -> None:
    app = fake_app(RequestsClient())
    async with app.run_test(size=(120, 30)) as pilot:
        await loaded(pilot)
        # The header counts only the request that would still do something
        await wait_for(pilot, lambda: "1 wait for approve (A)" in screen_text(app), what="the header's hint")
        await pilot.press("A")
        screen = await wait_for(pilot, lambda: isinstance(app.screen, PendingScreen) and app.screen.keys
                                and app.screen, what="the approvals screen")
        table = screen.query_one(DataTable)
        assert str(table.get_row("R2")[2]) == "kill (moot: jobs ended)"
        assert str(table.get_row("R1")[2]) == "kill"


async def test_j_and_k_move_in_the_approvals_screen_and_r_rejects() -> None:
    client = RequestsClient()
    app = fake_app(client)
    async with app.run_test(size=(120, 30)) as pilot:
        await loaded(pilot)
        await pilot.press("A")
        screen = await wait_for(pilot, lambda: isinstance(app.screen, PendingScreen) and app.screen.keys
                                and app.screen, what="the approvals screen")
        table = screen.query_one(DataTable)
        await pilot.press("j")
        assert table.cursor_row == 1 and isinstance(app.screen, PendingScreen)
        await pilot.press("k")
        assert table.cursor_row == 0 and isinstance(app.screen, PendingScreen)
        assert "r Reject" in screen_text(app)
        await pilot.press("r")
        await wait_for(pilot, lambda: not isinstance(app.screen, PendingScreen), what="the reject's confirmation")
        assert "reject R1" in screen_text(app)


LONG_REASON = "the batch hangs on a lock that the GL close holds; kill it so that the close can go on tonight"


async def test_the_approvals_screen_cuts_a_long_reason_marked_with_a_tilde() -> None:
    # (REASON ran past the table's edge, cut there with no `~`)
    client = RequestsClient()
    client.requests[0]["reason"] = LONG_REASON
    app = fake_app(client)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await pilot.press("A")
        screen = await wait_for(pilot, lambda: isinstance(app.screen, PendingScreen) and app.screen.keys
                                and app.screen, what="the approvals screen")
        table = screen.query_one(DataTable)
        reason = str(table.get_row("R1")[6])
        assert reason.endswith("~") and LONG_REASON.startswith(reason[:-1]), reason
        assert str(table.get_row("R2")[6]) == "slow"  # (a short one stays whole)
        assert table.virtual_size.width <= table.scrollable_content_region.width
        line = next(line for line in screen_text(app).splitlines() if "R1" in line)
        assert reason in line, line
