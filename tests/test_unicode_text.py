"""Text in any script through a real run: the plan name, an operator's hold reason and a job's output in French,
Japanese and emoji (and bytes that are not UTF-8) read as written in `status`, `why`, `history`, `audit` and `logs`;
a job id outside ASCII is refused with the character named."""

from __future__ import annotations

import json
from pathlib import Path

from tests.integration.helpers import cli, job_states, start, stop_proc, wait_for

REASON = "attente de la Société 日本 🚀"


def test_a_run_in_three_scripts_reads_as_written_in_every_verb(tmp_path: Path, no_ipc_leaks: None) -> None:
    # Given a run whose first job waits for a file, then prints three scripts and two bytes that are not UTF-8
    go = tmp_path / "go"
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "name: Société-paie\njobs:\n"
        f"  charge:\n    command: \"while [ ! -e {go} ]; do sleep 0.05; done; "
        "printf 'Société chargée\\\\n日本語 🚀\\\\n\\\\377\\\\376 fin\\\\n'\"\n"
        "  poste: {command: 'echo ok', depends_on: [charge]}\n", encoding="utf-8")
    sd = tmp_path / "sd"
    proc = start("run", str(plan), "--state-dir", str(sd))
    try:
        wait_for(lambda: job_states(sd).get("charge") == "RUNNING", what="charge running")
        # When an operator holds the second job with a reason in three scripts, and the first ends
        cli("hold", "poste", "--reason", REASON, "--state-dir", str(sd), check=True)
        go.touch()
        wait_for(lambda: job_states(sd).get("charge") == "SUCCEEDED", what="charge done")
        # Then every verb shows the plan's name and the reason as written
        st = cli("status", "--state-dir", str(sd), check=True).stdout
        assert "plan Société-paie" in st and f"held by root: {REASON}" in st, st
        assert f"held by root: {REASON}" in cli("why", "poste", "--state-dir", str(sd), check=True).stdout
        hist = cli("history", "poste", "--state-dir", str(sd), check=True).stdout
        assert f"root hold ({REASON}): job 'poste' held" in hist, hist
        assert f"reason: {REASON}" in cli("audit", "--state-dir", str(sd), check=True).stdout
        st_json = json.loads(cli("status", "--state-dir", str(sd), "--json", "--all", check=True).stdout)
        rows = {j["job"]: j for j in st_json["jobs"]}
        assert REASON in json.dumps(rows["poste"], ensure_ascii=False), rows["poste"]
        # And the output reads as UTF-8 with U+FFFD for the bad bytes (a pipe gets them as they are)
        logs = cli("logs", "charge", "--state-dir", str(sd), "--json", check=True).stdout
        assert json.loads(logs)["text"] == "Société chargée\n日本語 🚀\n\ufffd\ufffd fin\n"
        cli("release", "poste", "--state-dir", str(sd), check=True)
        assert proc.wait(60) == 0
    finally:
        stop_proc(proc, grace=10)


def test_a_job_id_outside_ascii_is_refused_naming_the_character(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: ids\njobs:\n  société_load: {command: 'true'}\n  日本: {command: 'true'}\n",
                    encoding="utf-8")
    for args in (("validate", str(plan)), ("run", str(plan), "--state-dir", str(tmp_path / "sd"))):
        p = cli(*args)
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
        lines = p.stderr.splitlines()
        assert f"{plan}:3: job 'société_load': 'société_load' is not a valid job id: it holds 'é' (U+00E9)" in \
            p.stderr and any(ln.startswith(f"{plan}:4: job '日本'") and "'日' (U+65E5)" in ln for ln in lines), \
            p.stderr


def other_digits(text: str, zero: int = 0x660) -> str:
    """`text` with its digits written in another script: Arabic-Indic (U+0660...), or fullwidth for 0xFF10."""
    return text.translate({ord("0") + d: zero + d for d in range(10)})


def test_digits_of_other_scripts_in_durations_times_sizes_and_exit_codes_are_refused(tmp_path: Path) -> None:
    # (Python's int() and float() read them as numbers: a timeout of Arabic-Indic `1s` was a second)
    o = other_digits
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "name: digits\njobs:\n"
        f"  a: {{command: 'true', timeout: '{o('1s')}'}}\n"
        f"  b: {{command: 'true', not_before: '+{o('2s')}'}}\n"
        f"  c: {{command: 'true', deadline: '{o('12:00')}+1d'}}\n"
        f"  d: {{command: 'true', retries: {{count: 1, delay: '{o('500ms')}'}}}}\n"
        f"  e: {{command: 'true', memory: '{o('512M')}'}}\n"
        f"  f: {{command: 'true', retries: {{count: 1, exit_codes: ['{o('100-110')}']}}}}\n"
        f"  g:\n    command: 'true'\n    deadline: '12:00+{o('1d')}'\n    expected: '{o('10s', 0xFF10)}'\n",
        encoding="utf-8")
    not_a_time = "is not a time; use HH:MM"
    said = [f"{plan}:3: job 'a': timeout: '{o('1s')}' is not a duration",
            f"{plan}:4: job 'b': not_before: '+{o('2s')}' {not_a_time}",
            f"{plan}:5: job 'c': deadline: '{o('12:00')}+1d' {not_a_time}",
            f"{plan}:6: job 'd': retries delay: '{o('500ms')}' is not a duration",
            f"{plan}:7: job 'e': memory must be MiB or a size like 512M or 4G, not the text '{o('512M')}'",
            f"{plan}:8: job 'f': '{o('100-110')}' is not an exit code or range",
            f"{plan}:11: job 'g': deadline: '12:00+{o('1d')}' {not_a_time}",
            f"{plan}:12: job 'g': expected: '{o('10s', 0xFF10)}' is not a duration"]
    for args in (("validate", str(plan)), ("run", str(plan), "--state-dir", str(tmp_path / "sd"))):
        p = cli(*args)
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
        lines = p.stderr.splitlines()
        assert len(lines) == len(said), p.stderr
        for line, head in zip(lines, said, strict=True):
            assert line.startswith(head), (line, head)
    assert not (tmp_path / "sd").exists()
