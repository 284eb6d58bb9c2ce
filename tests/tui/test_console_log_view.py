"""The job detail's log view: of a big log what is left out is said and the view starts at a line; text in any
script shows as written, bytes that are not UTF-8 as U+FFFD, escape sequences as text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from console_fakes import FakeClient
from console_helpers import fake_app, loaded, screen_text, wait_for
from textual.widgets import Log

from tui.screens.job_detail import JobDetailScreen
from tui.widgets.job_table import JobTable


async def test_the_log_of_a_6_mb_job_says_what_was_left_out_and_starts_at_a_line(tmp_path: Path) -> None:
    # Given a job that printed 6 MB of numbered lines of 61 bytes
    fake = FakeClient(state_dir=tmp_path)
    path = fake.log_file("load_fx_rates", 2)
    path.parent.mkdir(parents=True)
    line_count = 6 * 1024 * 1024 // 61
    path.write_bytes(b"".join(b"line %07d " % n + b"x" * 47 + b"\n" for n in range(line_count)))
    app = fake_app(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        # When its detail is opened
        app.screen.query_one(JobTable).select_job("load_fx_rates")
        await pilot.press("enter")
        screen = await wait_for(pilot, lambda: isinstance(app.screen, JobDetailScreen) and app.screen._log_pos
                                and app.screen, what="the log")
        lines = screen.query_one("#log", Log).lines
        # Then the first line says how much was left out and where it all is
        assert lines[0].startswith("[... ") and "MB of earlier output left out" in lines[0], lines[0]
        assert "`wloadctl logs load_fx_rates` has it all" in lines[0]
        # And every other line is whole, up to the log's last
        assert all(ln.startswith("line ") and len(ln) == 60 for ln in lines[1:] if ln), lines[1:3]
        assert lines[-1] == "" or lines[-1].startswith(f"line {line_count - 1:07d}")
        shown = [ln for ln in lines[1:] if ln]
        assert shown[-1].startswith(f"line {line_count - 1:07d}")
        left = int(shown[0].split()[1])
        assert f"{left * 61 / 1024 / 1024:.1f} MB" in lines[0]


async def _open_log(pilot: Any, job: str) -> JobDetailScreen:
    app = pilot.app
    app.screen.query_one(JobTable).select_job(job)
    await pilot.press("enter")
    return await wait_for(pilot, lambda: isinstance(app.screen, JobDetailScreen) and app.screen._log_pos
                          and app.screen, what="the log")


async def test_the_log_shows_accents_cjk_and_emoji_and_a_character_cut_between_two_reads_whole(
        tmp_path: Path) -> None:
    # Given a running job that printed French, Japanese, an emoji, an escape sequence, bytes that are not
    # UTF-8, and the first byte of a two-byte character
    fake = FakeClient(state_dir=tmp_path)
    path = fake.log_file("load_gl")
    path.parent.mkdir(parents=True)
    path.write_bytes("Société chargée\n日本語 出力 🚀\n".encode() + b"\x1b[2Jbad \xff\xfe end\ncaf\xc3")
    app = fake_app(fake)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        # When its detail is opened
        screen = await _open_log(pilot, "load_gl")
        log = screen.query_one("#log", Log)
        # Then the text shows as written, the bad bytes as U+FFFD and the escape sequence as text
        assert log.lines[:3] == ["Société chargée", "日本語 出力 🚀", "^[[2Jbad \ufffd\ufffd end"], log.lines
        text = screen_text(app)
        assert "Société chargée" in text and "日本語 出力 🚀" in text, text
        # And the half character waits for the rest of it
        assert log.lines[3:] == ["caf"], log.lines
        # When the job prints the character's second byte
        with path.open("ab") as f:
            f.write(b"\xa9 cr\xc3\xa8me\n")
        size = path.stat().st_size
        await wait_for(pilot, lambda: screen._log_pos == size, what="the rest of the log")
        # Then the character shows whole
        assert log.lines[3:5] == ["café crème", ""], log.lines


async def test_an_attempt_that_ended_in_half_a_character_shows_it_as_u_fffd(tmp_path: Path) -> None:
    # Given a failed job whose output ends in the first two bytes of a three-byte character
    fake = FakeClient(state_dir=tmp_path)
    path = fake.log_file("load_fx_rates")
    path.parent.mkdir(parents=True)
    path.write_bytes("échec\nfin ".encode() + "日".encode()[:2])
    app = fake_app(fake)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        # When its detail is opened
        screen = await _open_log(pilot, "load_fx_rates")
        log = screen.query_one("#log", Log)
        # Then the cut character shows as U+FFFD: the attempt is over, nothing will finish it
        await wait_for(pilot, lambda: log.lines[1:] == ["fin \ufffd"], what=f"the last line ({log.lines})")
        assert log.lines[0] == "échec"
