"""Layout at 80x24 and 220x55: toasts inside a pane, the help wrapped at words, the DAG's line about its
centre job, the dialogs' own footers, long ids whole when there is room and marked `~` when cut."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import console_fakes
import pytest
from console_helpers import fake_app, loaded, screen_text, wait_for
from textual.binding import Binding
from textual.geometry import Region, Spacing
from textual.widget import Widget
from textual.widgets._toast import Toast

from tui.screens.confirm import ConfirmScreen
from tui.screens.help import HelpScreen, help_entries, wrap_entries
from tui.screens.job_detail import JobDetailScreen
from tui.screens.main import MainScreen
from tui.screens.pipeline import PipelineScreen
from tui.screens.quit import QuitScreen
from tui.toasts import make_room, toast_rows
from tui.widgets.dag_view import dag_info
from tui.widgets.job_table import JobTable, columns_for

SIZES = [(80, 24), (220, 55)]
LONG = "load_general_ledger_postings_for_emea_region_with_reconciliation_batch_01"
"""73 characters, as an operator's plan had it."""
BORDER = Spacing(1, 1, 1, 1)


def inside(widget: Widget) -> Region:
    """The rows and columns within a pane's border."""
    return widget.region.shrink(BORDER)


def toasts(app: Any) -> list[Toast]:
    return list(app.screen.query(Toast))


def footer_line(app: Any) -> str:
    return screen_text(app).splitlines()[-1]


# -- toasts ----------------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
async def test_a_toast_stands_inside_the_lowest_pane_clear_of_its_borders(size: tuple[int, int]) -> None:
    app = fake_app()
    async with app.run_test(size=size, notifications=True) as pilot:
        await loaded(pilot)
        app.notify("sorted by duration desc", timeout=30)
        await wait_for(pilot, lambda: toasts(app) and toasts(app)[0].region, 5, "the toast")
        toast = toasts(app)[0].region
        panes = [p for p in app.screen.query("#panes > *") if p.display and p.region.contains_region(toast)]
        assert panes, (toast, screen_text(app))
        assert inside(panes[0]).contains_region(toast), (toast, panes[0].region)
        assert "sorted by duration desc" in screen_text(app)


@pytest.mark.parametrize("size", SIZES)
async def test_a_burst_of_toasts_stays_inside_the_pane_and_shows_the_newest(size: tuple[int, int]) -> None:
    app = fake_app()
    async with app.run_test(size=size, notifications=True) as pilot:
        await loaded(pilot)
        for k in range(20):
            app.notify(f"note {k:02d}: executor restarted", timeout=30)
            await pilot.pause()
        await wait_for(pilot, lambda: any("note 19" in str(t.render()) for t in toasts(app)), 5, "the newest")
        await pilot.pause(0.1)
        panes = inside(app.screen.query_one("#panes"))
        for t in toasts(app):
            assert panes.contains_region(t.region), (t.region, panes, screen_text(app))
        assert "note 19" in screen_text(app)


async def test_on_the_job_detail_toasts_stand_inside_the_log_pane() -> None:
    app = fake_app()
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await loaded(pilot)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, JobDetailScreen), 5, "the detail")
        for k in range(8):
            app.notify(f"note {k}", timeout=30)
            await pilot.pause()
        await wait_for(pilot, lambda: any("note 7" in str(t.render()) for t in toasts(app)), 5, "the toasts")
        log = inside(app.screen.query_one("#log"))
        assert all(log.contains_region(t.region) for t in toasts(app)), screen_text(app)


@pytest.mark.parametrize(("keys", "dialog"), [(["q"], "#dialog"), (["j", "j", "j", "x"], "#dialog")])
async def test_a_dialog_opened_over_toasts_keeps_them_below_it(keys: list[str], dialog: str) -> None:
    app = fake_app(supervised=True)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await loaded(pilot)
        for k in range(6):
            app.notify(f"note {k}: executor restarted", timeout=30)
            await pilot.pause()
        await pilot.press(*keys)
        await wait_for(pilot, lambda: app.screen.query(dialog), 5, "the dialog")
        await pilot.pause(0.2)
        box = app.screen.query_one(dialog).region
        shown = toasts(app)
        assert shown and any("note 5" in str(t.render()) for t in shown)
        for t in shown:
            assert t.region.y >= box.bottom and t.region.bottom <= 22, (t.region, box, screen_text(app))


async def test_toasts_stand_above_a_prompt_line_not_over_it() -> None:
    app = fake_app()
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await loaded(pilot)
        for k in range(6):
            app.notify(f"note {k}: executor restarted", timeout=30)
            await pilot.pause()
        await pilot.press("colon")
        await wait_for(pilot, lambda: app.screen.query("#prompt"), 5, "the prompt")
        await pilot.pause(0.2)
        prompt = app.screen.query_one("#prompt").region
        shown = toasts(app)
        assert shown and any("note 5" in str(t.render()) for t in shown)
        assert all(t.region.bottom <= prompt.y for t in shown), (prompt, screen_text(app))
        assert "e.g. rerun load_gl" in screen_text(app)


async def test_toasts_move_up_when_the_prompt_grows_with_its_error() -> None:
    app = fake_app()
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await loaded(pilot)
        app.notify("no job matches nosuchjob", timeout=30)
        await pilot.press("colon")
        await wait_for(pilot, lambda: app.screen.query("#prompt"), 5, "the prompt")
        await pilot.pause(0.2)
        before = app.screen.query_one("#prompt").region
        # When what is typed is wrong, the prompt's hint says why over several lines
        await pilot.press(*"frobnicate")
        await wait_for(pilot, lambda: app.screen.query_one("#prompt").region.y < before.y, 5, "the prompt to grow")
        await pilot.pause(0.2)
        # Then the toast stands above the grown prompt, not over the line typed in
        prompt = app.screen.query_one("#prompt").region
        shown = toasts(app)
        assert shown and all(t.region.bottom <= prompt.y for t in shown), (prompt, screen_text(app))
        assert "frobnicate" in screen_text(app)


def test_the_oldest_toasts_make_room_for_a_new_one() -> None:
    class N:
        def __init__(self, message: str, title: str = "") -> None:
            self.message, self.title = message, title

    up = [N("one"), N("two"), N("three " * 20)]  # the third wraps to 3 lines of a 60-column toast
    assert toast_rows(up[2].message) == 3
    assert make_room(up, N("four"), 6) == []
    assert make_room(up, N("four"), 5) == [up[0]]
    assert make_room(up, N("four"), 4) == up[:2]
    assert make_room(up, N("four"), 1) == up  # the new one shows, however little room
    # A screen shown over toasts already up: the newest of them stays
    assert make_room(up, None, 4) == [up[0]]
    assert make_room(up, None, 1) == up[:2]


# -- help ------------------------------------------------------------------------------


def help_box(text: str) -> list[str]:
    """The lines inside the help's border, as shown."""
    lines = text.splitlines()
    top = next(k for k, line in enumerate(lines) if "+- help" in line)
    left, right = lines[top].index("+"), lines[top].rindex("+")
    out = []
    for line in lines[top + 1 :]:
        if line[left] == "+":
            break
        out.append(line[left + 2 : right - 1].rstrip())
    return out


@pytest.mark.parametrize("size", SIZES)
async def test_the_help_wraps_at_words_with_descriptions_in_their_column(size: tuple[int, int]) -> None:
    app = fake_app()
    async with app.run_test(size=size) as pilot:
        await loaded(pilot)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), 5, "the help")
        await pilot.pause(0.1)
        width = app.screen.query_one("#help").scrollable_content_region.width
        seen: list[str] = []
        for _ in range(12):  # (every page)
            seen += help_box(screen_text(app))
            await pilot.press("pagedown")
            await pilot.pause()
        assert seen[0].startswith("Operator verbs:")
        # A paragraph fills its lines: the next word did not fit on the line before
        assert len(seen[0]) + 1 + len(seen[1].split()[0]) > width, seen[:2]
        for above, line in itertools.pairwise(seen):
            assert len(line) <= width
            # A line at the box's edge starts a section (after a blank line) or goes on with a paragraph
            # that starts there; a key's or a state's description that wraps stays in its column
            if line and not line[0].isspace():
                assert not above or not above[0].isspace(), (above, line)
        assert await wait_for(pilot, lambda: footer_line(app).strip(), 5, "the footer") == "esc Close"


def test_the_help_at_80_columns_keeps_the_key_column_for_wrapped_descriptions() -> None:
    lines = wrap_entries(help_entries(), 75)
    hold = next(k for k, line in enumerate(lines) if "hold: the jobs" in line)
    assert lines[hold].startswith("  h                hold: the jobs")
    assert lines[hold + 1] == " " * 19 + "downstream waits"
    assert all(len(line) <= 75 for line in lines)
    assert all(ord(c) < 128 for line in lines for c in line)
    legend = next(k for k, line in enumerate(lines) if line.startswith("  WAIT    WAITING"))
    assert "(narrow header: W)" in lines[legend] + " " + lines[legend + 1].strip()
    assert lines[legend + 2].startswith(" " * 26 + "-> ")


# -- the DAG pane's line on its centre job ------------------------------------------


@pytest.mark.parametrize(
    ("size", "line"),
    [
        ((80, 24), "critical-path place 1 of 14, expected 1.0s (no history), 5.0s to the end"),
        ((220, 55), "critical-path place 1 of 14 (1 starts first), expected 1.0s (no history), 5.0s to the end"),
    ],
)
async def test_the_dag_line_keeps_place_expected_and_time_to_the_end(size: tuple[int, int], line: str) -> None:
    app = fake_app()
    async with app.run_test(size=size) as pilot:
        await loaded(pilot)
        shown = [ln for ln in screen_text(app).splitlines() if "critical-path place" in ln]
        assert shown and f"| {line} " in shown[0], shown


def test_the_dag_line_drops_explanations_before_figures() -> None:
    for width in (90, 76, 60, 45):
        info = dag_info(1234, 100_000, "1h02m", True, "12h03m", width)
        assert len(info) <= width
        assert "1234" in info and "100000" in info and "1h02m" in info and "12h03m to" in info, info
    assert dag_info(4, 14, "1.0s", True, "4.0s", 30) == "4/14 exp 1.0s? 4.0s to end"
    assert dag_info(1234, 100_000, "1h02m", True, "12h03m", 30) == "1234/100000 exp 1h02m? 12h03m~"
    assert dag_info(None, 14, "1.0s", False, "5.0s", 80) == "expected 1.0s, 5.0s to the end"
    assert dag_info(3, 14, "1.0s", False, "5.0s", 12) == "3/14 exp 1.~"


# -- the dialogs' footers ------------------------------------------------------------


async def test_under_the_quit_dialog_the_footer_shows_its_keys_not_the_main_screens() -> None:
    app = fake_app(supervised=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await wait_for(pilot, lambda: "/ Filter" in footer_line(app), 5, "the main screen's footer")
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, QuitScreen), 5, "the question")
        footer = await wait_for(pilot, lambda: footer_line(app).strip(), 5, "the dialog's footer")
        assert "d Detach" in footer and "s Stop run" in footer and "n Stay" in footer, footer
        assert not {"Filter", "Hold", "Help", "Quit"} & set(footer.split()), footer
        await pilot.press("n")
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen), 5, "the main screen")
        await wait_for(pilot, lambda: "/ Filter" in footer_line(app), 5, "the main screen's footer")


async def test_under_a_confirmation_and_a_prompt_the_footer_shows_their_keys() -> None:
    app = fake_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await select(pilot, "post_interest")
        await pilot.press("h")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), 5, "the confirmation")
        footer = await wait_for(pilot, lambda: footer_line(app).split(), 5, "the dialog's footer")
        assert footer == ["y", "Yes", "n", "No"]
        assert "y: hold 1 job(s)" in screen_text(app)  # the dialog's own keys line still shows
        await pilot.press("n", "slash")
        await wait_for(pilot, lambda: "esc Cancel" in footer_line(app), 5, "the prompt's footer")
        assert "Filter" not in footer_line(app)


async def test_the_job_details_footer_holds_every_verb_at_80_columns() -> None:
    # (`[ Prev attempt ] Next attempt` took the room: the footer ended `R R`, kill, set-ok and skip cut off)
    app = fake_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await select(pilot, "post_interest")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, JobDetailScreen), 5, "the job detail")
        footer = await wait_for(pilot, lambda: "Back" in footer_line(app) and footer_line(app), 5, "its footer")
        assert footer.rstrip().endswith("x Kill o OK s Skip"), footer
        assert "[] Attempt" in footer


async def test_at_60_columns_the_footer_shows_whole_bindings_only() -> None:
    # (the footer was cropped where the terminal ended: `... t Retry R Reru`, no `~`)
    app = fake_app()
    async with app.run_test(size=(60, 15)) as pilot:
        await loaded(pilot)
        footer = await wait_for(pilot, lambda: "/ Filter" in footer_line(app) and footer_line(app), 5, "the footer")
        shown = [f"{b.key_display or b.key} {b.description}" for b in MainScreen.BINDINGS
                 if isinstance(b, Binding) and b.show]
        words = footer.split()
        pairs = [" ".join(words[k:k + 2]) for k in range(0, len(words), 2)]
        assert pairs and pairs == shown[: len(pairs)], footer
        assert len(pairs) < len(shown)  # (60 columns do not hold them all: some are left out, whole)


@pytest.mark.parametrize(("size", "rows", "panes"), [((60, 15), 5, 4), ((60, 13), 4, 3), ((80, 24), 10, 8)])
async def test_on_a_short_terminal_the_lower_panes_give_the_table_their_lines(
    size: tuple[int, int], rows: int, panes: int
) -> None:
    # (at 60x15 the panes kept their 7 lines and the table showed 2 jobs; 80x24 looks as it did)
    app = fake_app()
    async with app.run_test(size=size) as pilot:
        await loaded(pilot)
        await pilot.pause()
        lines = screen_text(app).splitlines()
        top = next(k for k, line in enumerate(lines) if line.startswith("+- jobs"))
        bottom = next(k for k in range(top + 1, len(lines)) if lines[k].startswith("+-"))
        shown = [line for line in lines[top + 2 : bottom] if line.strip("| ")]  # (+2: the border, the heading)
        assert len(shown) == rows, screen_text(app)
        assert app.screen.query_one("#panes").outer_size.height == panes


def test_a_notice_while_no_screen_is_up_is_left_to_textual() -> None:
    # (a notice that came as a console started or ended raised ScreenStackError in the fitting of toasts, and the
    # console died with it)
    app = fake_app()
    assert not app.screen_stack
    app.fit_toasts(None)


# -- long ids --------------------------------------------------------------------------


@pytest.fixture
def long_id(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The canned run with load_gl (running, on the critical path) named by a 73-character id."""
    text = console_fakes.PLAN_TEXT.replace("load_gl", LONG)
    rows = {(LONG if k == "load_gl" else k): v for k, v in console_fakes.ROWS.items()}
    monkeypatch.setattr(console_fakes, "PLAN_TEXT", text)
    monkeypatch.setattr(console_fakes, "ROWS", rows)
    yield


async def select(pilot: Any, job: str) -> None:
    assert pilot.app.screen.query_one(JobTable).select_job(job)
    await pilot.pause()


@pytest.mark.usefixtures("long_id")
async def test_a_73_character_id_shows_whole_at_220_columns() -> None:
    app = fake_app()
    async with app.run_test(size=(220, 55)) as pilot:
        await loaded(pilot)
        rows = [line for line in screen_text(app).splitlines() if "RUNNING" in line and "load_gen" in line]
        assert rows and f" {LONG}* " in rows[0], rows  # whole, with its critical-path mark
        assert "exit status 3" in screen_text(app)  # INFO keeps its room
        await select(pilot, LONG)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, JobDetailScreen), 5, "the detail")
        await pilot.pause(0.1)
        assert screen_text(app).splitlines()[0].startswith(f" {LONG}  RUNNING  tier critical")


@pytest.mark.usefixtures("long_id")
async def test_at_80_columns_a_long_id_is_cut_marked_never_silently() -> None:
    app = fake_app(supervised=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        rows = [line for line in screen_text(app).splitlines() if "RUN " in line and "load_gen" in line]
        assert rows and "~" in rows[0] and "batch_01" in rows[0], rows  # head and tail, the cut marked
        # The detail of a job below it: the line naming it is too long for the box
        await select(pilot, "post_interest")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, JobDetailScreen), 5, "the detail")
        await pilot.pause(0.1)
        text = screen_text(app)
        line = next(ln for ln in text.splitlines() if "depends on (1):" in ln)
        assert line.rstrip(" |").endswith("~"), line
        assert len(line) == 80
        # The nodes pane names the running jobs, cut to the pane, marked
        await pilot.press("escape", "2")
        await pilot.pause(0.1)
        rows = [ln for ln in screen_text(app).splitlines() if "alive" in ln or "suspect" in ln]
        assert rows and all(len(r.rstrip()) <= 80 for r in rows)
        assert any(r.rstrip(" |").endswith("~") for r in rows), rows
        # So does the SLA pane, naming the next deadline's job
        await pilot.press("3")
        await pilot.pause(0.1)
        rows = [ln for ln in screen_text(app).splitlines() if ln.startswith("| critical ")]
        assert rows and rows[0].rstrip(" |").endswith("~") and "22:43" in rows[0], rows


def test_the_id_column_grows_to_a_long_id_when_info_keeps_its_room() -> None:
    def widths(width: int) -> tuple[int, int]:
        cols = {c.title: c.width for c in columns_for(width, len(LONG))}
        return cols["JOB"], cols.get("INFO", 0)

    assert widths(220) == (len(LONG) + 1, 99)  # the id, its mark, and INFO wider than the id
    assert widths(160)[0] == len(LONG)
    assert widths(130)[0] == 48 and widths(130)[1] >= 35
    assert widths(80) == (25, 16)
    assert {c.title: c.width for c in columns_for(78, 13)}["JOB"] == 14  # room for post_interest*



class PipelineClient(console_fakes.FakeClient):
    """A fake run that publishes pipeline figures, as `wloadctl top` reads them."""

    def pipeline(self) -> dict[str, Any]:
        stats = {"p50": 0.0002, "p99": 0.0086, "n": 50}
        # (its scheduler's host named so long that its line is wider than the pane)
        return {"run": self.run.run_id, "live": True, "scheduler_pid": 4242, "epoch": 1, "age": 0.1,
                "scheduler_host": "scheduler-7.batch-cluster-north.datacenter-2.example.org",
                "stale": False, "queues": {"request": {"depth": 0, "max": 2, "batches_per_s": 0.1, "backlog": 0},
                                           "response": {"depth": 0, "max": 2, "batches_per_s": 0.3}},
                "arena": {"used": 0, "capacity": 16 << 20, "live": 0},
                "latency": {"ready_to_dispatch": stats, "finish_to_dependent_start": stats},
                "journal": {"commit": stats, "commits_per_s": 0.3, "rows_per_commit": 1.7},
                "loop": {"turn": stats, "turns_per_s": 4.5}, "executors": [], "agents": []}


async def test_the_pipeline_pane_cuts_a_line_too_wide_for_it_rather_than_wrapping_it() -> None:
    app = fake_app(PipelineClient())
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await pilot.press("P")
        await wait_for(pilot, lambda: isinstance(app.screen, PipelineScreen) and app.screen.view,
                       what="the pipeline figures")
        await pilot.pause()
        lines = [line.strip("| ") for line in screen_text(app).splitlines()]
        said = next(line for line in lines if line.startswith("(live, pid 4242 on scheduler-7"))
        # The line wider than the pane ends in the cut mark; nothing of it wraps to a line of its own
        assert said.endswith("~"), said
        assert lines[lines.index(said) + 1].startswith("request queue"), lines


class LongWhyClient(console_fakes.FakeClient):
    """A fake run whose `why` says, at the end of a long sentence, when the job goes on."""

    def why(self, job: str) -> dict[str, Any]:
        return {**super().why(job), "reasons": [
            "in retry delay after attempt 3: exit status 4; retry 3/3 in 252.7s; becomes READY in 150.9s"]}


async def test_at_80_columns_the_detail_wraps_why_a_job_waits_rather_than_cutting_its_end() -> None:
    app = fake_app(LongWhyClient())
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await select(pilot, "post_interest")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, JobDetailScreen) and app.screen.why, 5, "the why")
        await pilot.pause(0.1)
        text = screen_text(app)
        assert "becomes READY in 150.9s" in text, text
        assert "in retry delay after attempt 3" in text
