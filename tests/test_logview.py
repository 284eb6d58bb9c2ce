"""`wloadctl logs` on a terminal: a job's escape sequences are shown, not obeyed; its last lines; a log in blocks."""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.helpers import ENV, cli
from wloadctl.logview import BLOCK, Shown, tail_start

HOSTILE = b"a\x1b]0;TITLE\x07b\x1b[2Jc\r\nd\re\xc2\x9bf caf\xc3\xa9\x1b[6n\n"
"""Sets the window's title, clears the screen, asks the terminal to type its cursor's place into the input; a CRLF,
a lone return, a C1 CSI and an accented letter around them."""
SHOWN = b"a^[]0;TITLE^Gb^[[2Jc\r\nd^Me^[[f caf\xc3\xa9^[[6n\n"


def test_control_characters_are_shown_in_caret_notation_and_the_text_around_them_kept() -> None:
    assert Shown(raw=False).feed(HOSTILE) == SHOWN
    assert Shown(raw=True).feed(HOSTILE) == HOSTILE
    assert Shown(raw=False).feed(b"\x00\x7f\ttab\n") == b"^@^?\ttab\n"


@pytest.mark.parametrize("cut", range(1, len(HOSTILE)))
def test_a_return_or_a_c1_control_cut_between_two_blocks_reads_as_it_would_whole(cut: int) -> None:
    s = Shown(raw=False)
    assert s.feed(HOSTILE[:cut]) + s.feed(HOSTILE[cut:]) + s.end() == SHOWN


def test_a_held_return_at_the_very_end_is_shown_by_end() -> None:
    s = Shown(raw=False)
    assert s.feed(b"50%\r") == b"50%" and s.end() == b"^M"


MIXED = "Société 日本語 🚀\n".encode() + b"bad \xff\xfe \x9b[2J \xe6\x97 end\n"
"""UTF-8 in three scripts, then bytes that are not UTF-8: two invalid bytes, a lone 0x9B (CSI to a terminal in an
8-bit mode) and a three-byte character cut after two."""
MIXED_SHOWN = "Société 日本語 🚀\nbad \ufffd\ufffd \ufffd[2J \ufffd end\n".encode()


@pytest.mark.parametrize("cut", range(1, len(MIXED)))
def test_text_in_any_script_shows_as_written_and_bytes_not_utf8_as_u_fffd(cut: int) -> None:
    s = Shown(raw=False)
    assert s.feed(MIXED[:cut]) + s.feed(MIXED[cut:]) + s.end() == MIXED_SHOWN
    assert Shown(raw=True).feed(MIXED) == MIXED


def test_a_character_cut_at_the_very_end_is_shown_as_u_fffd_by_end() -> None:
    s = Shown(raw=False)
    assert s.feed("fin 日".encode()[:-1]) == b"fin " and s.end() == "\ufffd".encode()


@pytest.mark.parametrize(("text", "n", "last"), [
    (b"1\n2\n3\n", 2, b"2\n3\n"),
    (b"1\n2\n3", 2, b"2\n3"),  # a last line without its newline counts
    (b"1\n2\n3\n", 5, b"1\n2\n3\n"),
    (b"", 3, b""),
    (b"\n\n\n", 1, b"\n"),
])
def test_tail_start_finds_the_last_lines(text: bytes, n: int, last: bytes) -> None:
    f = io.BytesIO(text)
    f.seek(tail_start(f, n))
    assert f.read() == last


def test_tail_start_crosses_blocks() -> None:
    lines = [b"x" * 1000 + b"%d\n" % k for k in range(3 * BLOCK // 1000)]
    f = io.BytesIO(b"".join(lines))
    f.seek(tail_start(f, len(lines) - 7))
    assert f.read() == b"".join(lines[7:])


def _on_a_terminal(argv: list[str]) -> bytes:
    """What a command writes to a terminal (a pty: the terminal's own output processing off)."""
    leader, follower = pty.openpty()
    import termios

    attrs = termios.tcgetattr(follower)
    attrs[1] &= ~termios.OPOST  # no CR added before each LF: what the command wrote, byte for byte
    termios.tcsetattr(follower, termios.TCSANOW, attrs)
    with subprocess.Popen(argv, stdout=follower, stderr=subprocess.PIPE, env=ENV) as p:
        os.close(follower)
        out = b""
        while select.select([leader], [], [], 30)[0]:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the terminal's other side closed
                break
            if not data:
                break
            out += data
        os.close(leader)
        err = p.stderr.read() if p.stderr else b""
        assert p.wait(30) == 0, err
    return out


def test_logs_on_a_terminal_shows_escape_sequences_a_pipe_gets_the_bytes(tmp_path: Path, no_ipc_leaks: None) -> None:
    out = tmp_path / "out.bin"
    out.write_bytes(HOSTILE + b"".join(b"line %d\n" % k for k in range(1, 6)))
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"name: lg\njobs:\n  esc: {{command: 'cat {out}'}}\n")
    sd = str(tmp_path / "sd")
    cli("run", str(plan), "--state-dir", sd, check=True)
    logs = [sys.executable, "-m", "wloadctl", "logs", "esc", "--state-dir", sd]
    # (a job's output reached the operator's terminal as is: its title set, the screen cleared, input typed)
    assert _on_a_terminal(logs) == SHOWN + b"".join(b"line %d\n" % k for k in range(1, 6))
    assert _on_a_terminal([*logs, "--raw"]) == out.read_bytes()
    assert subprocess.run(logs, capture_output=True, env=ENV, check=True).stdout == out.read_bytes()  # a pipe
    assert _on_a_terminal([*logs, "--tail", "2"]) == b"line 4\nline 5\n"
    assert cli(*logs[3:], "-n", "1", "--json", check=True).stdout.count("line 5") == 1
    p = cli(*logs[3:], "--tail", "0")
    assert p.returncode == 2 and "--tail" in p.stderr


def test_logs_on_a_terminal_shows_utf8_as_written_and_bad_bytes_as_u_fffd(tmp_path: Path, no_ipc_leaks: None) -> None:
    out = tmp_path / "out.bin"
    out.write_bytes(MIXED)
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"name: Société\njobs:\n  mixed: {{command: 'cat {out}'}}\n")
    sd = str(tmp_path / "sd")
    cli("run", str(plan), "--state-dir", sd, check=True)
    logs = [sys.executable, "-m", "wloadctl", "logs", "mixed", "--state-dir", sd]
    assert _on_a_terminal(logs) == MIXED_SHOWN
    assert subprocess.run(logs, capture_output=True, env=ENV, check=True).stdout == MIXED  # a pipe
    assert cli(*logs[3:], "--json", check=True).stdout.count("Soci\\u00e9t\\u00e9 \\u65e5") == 1
