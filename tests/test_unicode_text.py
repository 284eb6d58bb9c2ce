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
