"""The run header: every count on the progress line at any width, the elapsed time of a stopped run."""

from __future__ import annotations

from typing import Any

import pytest
from console_fakes import NOW
from textual.app import App

from tui.messages import LiveStatus, RunInfo
from tui.run_figures import RunSummary
from tui.widgets.run_header import RunHeader
from wloadctl.core.states import JobState as S


class HeaderApp(App[None]):
    def compose(self) -> Any:
        yield RunHeader()


def counts_of(**by_state: int) -> list[int]:
    counts = [0] * len(S)
    for name, n in by_state.items():
        counts[S[name]] = n
    return counts


async def progress_line(width: int, counts: list[int]) -> str:
    done = sum(counts[s] for s in (S.SUCCEEDED, S.FAILED, S.UPSTREAM_FAILED, S.SKIPPED))
    total = sum(counts)
    app = HeaderApp()
    async with app.run_test(size=(width, 24)) as pilot:
        header = app.query_one(RunHeader)
        header.show(RunInfo("r1", "eod", "2023-11-14", NOW - 60, "/nonexistent"),
                    RunSummary(total, done, done, 0, 8, 60.0, 300.0), counts,
                    LiveStatus(True, 4242, 1, 0.1), NOW)
        await pilot.pause()
        return str(header.render().plain.split("\n")[1])


@pytest.mark.parametrize("width", [80, 100, 200])
async def test_every_count_shows_with_a_queue_and_many_waiting(width: int) -> None:
    counts = counts_of(FAILED=2, HELD=1, RETRY_WAIT=3, RUNNING=8, QUEUED=40, READY=1_000, WAITING=16_723,
                       SUCCEEDED=3_277)
    line = await progress_line(width, counts)
    assert len(line) <= width - 2, line
    if width == 200:
        for shown in ("FAIL 2", "HELD 1", "RETRY 3", "RUN 8", "QUEUE 40", "READY 1000", "WAIT 16723", "OK 3277"):
            assert shown in line, (shown, line)
    else:  # narrower: the counts abbreviated, the labels kept
        for shown in ("FAIL 2", "HELD 1", "RETRY 3", "RUN 8", "QUEUE 40", "READY 1000", "WAIT 16k", "OK 3277"):
            assert shown in line, (shown, line)


async def test_the_bar_keeps_its_width_as_a_queue_comes_and_goes() -> None:
    without = await progress_line(80, counts_of(RUNNING=8, READY=1_000, WAITING=16_723, SUCCEEDED=3_277))
    with_queue = await progress_line(80, counts_of(RUNNING=8, QUEUED=40, READY=960, WAITING=16_723,
                                                   SUCCEEDED=3_277))
    assert without.index("]") == with_queue.index("]")
    assert "WAIT 16723" in without and "WAIT 16723" in with_queue


async def test_a_line_too_narrow_for_every_count_says_how_many_are_cut() -> None:
    line = await progress_line(40, counts_of(**{s.name: 123_456 for s in S}))
    assert len(line) <= 38 and line.rstrip().split()[-1].startswith("+"), line


async def test_a_narrow_line_abbreviates_rather_than_drops() -> None:
    counts = counts_of(FAILED=2, TIMED_OUT=1, UPSTREAM_FAILED=4, HELD=1, RETRY_WAIT=3, RUNNING=8, QUEUED=40,
                       READY=1_000, WAITING=167_230, SUCCEEDED=3_277, SKIPPED=5, CANCELLED=6)
    line = await progress_line(80, counts)
    assert len(line) <= 78, line
    for shown in (" F 2", " TO 1", " UF 4", " H 1", " RT 3", " R 8", " Q 40", " RD 1000", " W 167k", " OK 3277",
                  " SK 5", " CX 6"):
        assert shown in line, (shown, line)


def test_counts_abbreviate_to_four_characters() -> None:
    from tui.widgets.run_header import abbreviated

    assert [abbreviated(n) for n in (9_999, 16_723, 167_230, 1_234_567, 12_345_678)] == [
        "9999", "16k", "167k", "1.2M", "12M"]


async def test_a_stopped_run_opened_readonly_shows_the_time_it_ran_not_the_time_since() -> None:
    # Given a run that stopped with jobs left, its last job having started 10 minutes in
    from console_fakes import FakeClient
    from console_helpers import fake_app, loaded, screen_text, wait_for

    app = fake_app(FakeClient(live=False), readonly=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        # Then its elapsed time ends there, not at the clock's 12m34s
        await wait_for(pilot, lambda: "STOPPED" in screen_text(app), what="the stopped run")
        head = screen_text(app).splitlines()[0]
        assert "10m00s elapsed" in head, head


async def test_a_live_run_counts_its_elapsed_time_to_now() -> None:
    from console_fakes import FakeClient
    from console_helpers import fake_app, loaded, screen_text

    app = fake_app(FakeClient())
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        assert "12m34s elapsed" in screen_text(app).splitlines()[0]


async def test_a_run_whose_scheduler_dies_under_the_console_keeps_the_time_it_was_seen_running() -> None:
    # Given a live run 12m34s in, its last job having started 10 minutes in
    from console_fakes import FakeClient
    from console_helpers import fake_app, loaded, screen_text, wait_for

    fake = FakeClient()
    app = fake_app(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        assert "12m34s elapsed" in screen_text(app).splitlines()[0]
        # When its scheduler dies
        fake.live = False
        await wait_for(pilot, lambda: "STOPPED" in screen_text(app), what="the stopped run")
        # Then its elapsed time stays where the console last saw it running: it does not go back to 10m00s
        head = screen_text(app).splitlines()[0]
        assert "12m34s elapsed" in head, head


async def test_a_deadline_a_failure_blocks_is_counted_apart_from_at_risk_which_the_scheduler_flags() -> None:
    # Given a run whose revalue_fx (due in 20 minutes) is blocked by its failed upstream, none in its risk window
    from console_fakes import FakeClient
    from console_helpers import fake_app, loaded, screen_text

    from tui.widgets.sla_panel import SlaPanel

    app = fake_app(FakeClient())
    async with app.run_test(size=(160, 40)) as pilot:
        await loaded(pilot)
        head = screen_text(app).splitlines()[0]
        # Then the header counts it BLOCKED, not AT_RISK (`status` flags no job at risk)
        assert "1 BLOCKED" in head and "AT_RISK" not in head, head
        # and the SLA pane, naming it, does not also say there is no open deadline
        pane = str(app.screen.query_one(SlaPanel).render())
        assert "revalue_fx" in pane and "no open deadline" not in pane, pane


async def test_a_holding_run_names_its_held_jobs_in_the_room_its_deadline_flag_leaves_at_80_columns() -> None:
    # Given a live run that only waits for held jobs, one of whose deadlines is at risk
    counts = counts_of(HELD=5, WAITING=2, SUCCEEDED=41)
    app = HeaderApp()
    async with app.run_test(size=(80, 24)) as pilot:
        header = app.query_one(RunHeader)
        header.held = ["report_aml", "report_sanctions", "statements_emea"]
        header.at_risk = 1
        header.show(RunInfo("r1", "night-shift", "2023-11-14", NOW - 60, "/nonexistent"),
                    RunSummary(48, 41, 41, 0, 0, 268.0, None), counts, LiveStatus(True, 4242, 1, 0.1), NOW)
        await pilot.pause()
        line = str(header.render().plain.split("\n")[0])
    # Then the flag shows, and the names that did not fit before it are marked
    assert "HOLDING 5 held: report_aml ...  1 AT_RISK" in line, line
    assert len(line) <= 78, line


async def test_the_time_to_go_shows_only_after_the_elapsed_time_it_follows() -> None:
    # Given a header whose flags leave no room for the elapsed time at 80 columns
    counts = counts_of(HELD=5, WAITING=2, SUCCEEDED=41)
    app = HeaderApp()
    async with app.run_test(size=(80, 24)) as pilot:
        header = app.query_one(RunHeader)
        header.held = ["report_aml", "report_sanctions", "statements_emea"]
        header.at_risk, header.blocked = 1, 1
        header.show(RunInfo("r1", "night-shift", "2023-11-14", NOW - 60, "/nonexistent"),
                    RunSummary(48, 41, 41, 0, 0, 268.0, None), counts, LiveStatus(True, 4242, 1, 0.1), NOW)
        await pilot.pause()
        line = str(header.render().plain.split("\n")[0])
    # Then neither shows: not ", ? to go" after the flags as if they had a time to go
    assert "1 AT_RISK  1 BLOCKED" in line and "elapsed" not in line, line
    assert "to go" not in line, line
