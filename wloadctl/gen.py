"""Synthetic plans streamed to disk (bank, wide, chain), and their ninja/make twins."""

from __future__ import annotations

import bisect
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

Shape = Literal["bank", "wide", "chain"]
"""`bank`: a layered end-of-day run; `wide`: independent jobs; `chain`: one by one."""

SHAPES: tuple[str, ...] = ("bank", "wide", "chain")
"""The shapes `write_plan` knows."""

Style = Literal["flow", "block"]
"""`flow`: one job a line, `{command: ..., depends_on: [...]}`; `block`: one key a line,
upstream ids one per line (`- id`), as plans are written by hand."""

STYLES: tuple[str, ...] = ("flow", "block")
"""The styles `write_plan` knows."""

DEFAULT_COMMAND = "true"
"""What generated jobs run unless told otherwise: the cheapest real process."""

GenJob = tuple[str, tuple[str, ...], str]
"""(job id, upstream ids, SLA tier name) of one generated job."""

# The phases of a bank's end-of-day run, in order. A plan with fewer stages
# takes an evenly spread subset, always keeping the first and the last.
BANK_STAGES: tuple[str, ...] = (
    "open_day",
    "calendar_check",
    "fx_rates",
    "market_prices",
    "load_customers",
    "load_accounts",
    "load_deposits",
    "load_loans",
    "load_cards",
    "load_payments",
    "load_trades",
    "load_collateral",
    "validate_loads",
    "fx_revalue",
    "interest_deposits",
    "interest_loans",
    "interest_cards",
    "accrual_post",
    "fees_accounts",
    "fees_cards",
    "fees_payments",
    "overdraft_check",
    "limits_check",
    "ledger_post",
    "ledger_balance",
    "gl_subledger",
    "gl_balance",
    "suspense_clear",
    "recon_nostro",
    "recon_cards",
    "recon_payments",
    "recon_securities",
    "recon_intercompany",
    "breaks_report",
    "risk_positions",
    "risk_var",
    "liquidity_lcr",
    "liquidity_nsfr",
    "large_exposures",
    "capital_rwa",
    "aml_screening",
    "sanctions_screening",
    "fraud_scoring",
    "reg_reports",
    "mgmt_reports",
    "statements_retail",
    "statements_corporate",
    "notices",
    "dwh_extract",
    "dwh_load",
    "archive_ledger",
    "archive_logs",
    "purge_staging",
    "backup_db",
    "audit_trail",
    "sla_report",
    "handover",
    "roll_date",
    "reopen_channels",
    "close_day",
)
"""Stage names of the `bank` shape, in run order (60 of them)."""

_MIN_STAGES, _MAX_STAGES = 20, 60
_DEP_COUNT_WEIGHTS = (0.3, 0.4, 0.3)  # one, two or three upstream jobs: two on average
_SAME_STAGE_SHARE = 0.8  # upstream jobs come from the previous stage this often


def _tier(rng: random.Random) -> str:
    """An SLA tier drawn as a bank's batch is spread: 5/15/60/20 percent."""
    x = rng.random()
    if x < 0.05:
        return "critical"
    if x < 0.20:
        return "high"
    if x < 0.80:
        return "standard"
    return "low"


def _width(jobs: int) -> int:
    return max(6, len(str(max(jobs - 1, 0))))


def _bank_stages(jobs: int, rng: random.Random) -> list[tuple[str, int, int]]:
    """(name, first index, end index) of each stage: one job to open, one to close."""
    count = min(jobs, min(_MAX_STAGES, max(_MIN_STAGES, round(2 * jobs ** (1 / 3)))))
    if count == 1:
        names = [BANK_STAGES[0]]
    else:
        last = len(BANK_STAGES) - 1
        names = [BANK_STAGES[round(i * last / (count - 1))] for i in range(count)]
    if count <= 2:
        sizes = [1] * count
        sizes[-1] += jobs - count
    else:
        middle = count - 2
        weights = [rng.uniform(0.5, 1.5) for _ in range(middle)]
        spread = jobs - 2 - middle
        total = sum(weights)
        extra = [int(spread * w / total) for w in weights]
        for i in range(spread - sum(extra)):
            extra[i % middle] += 1
        sizes = [1, *(1 + e for e in extra), 1]
    out = []
    start = 0
    for name, size in zip(names, sizes, strict=True):
        out.append((name, start, start + size))
        start += size
    return out


def iter_jobs(jobs: int, shape: Shape, seed: int) -> Iterator[GenJob]:
    """Generate the jobs of a synthetic plan one at a time (nothing is kept in memory).

    Every upstream job comes before the jobs that depend on it.

    Args:
        jobs: how many jobs (at least 1).
        shape: `bank`, `wide` or `chain`.
        seed: the same seed gives the same jobs.

    Yields:
        (job id, upstream ids, SLA tier) for each job in order.

    Raises:
        ValueError: `jobs` is below 1 or `shape` is unknown.
    """
    if jobs < 1:
        raise ValueError(f"a plan needs at least one job, not {jobs}")
    if shape not in SHAPES:
        raise ValueError(f"unknown shape '{shape}'; use one of: {', '.join(SHAPES)}")
    rng = random.Random(seed)
    width = _width(jobs)
    if shape == "wide":
        for i in range(jobs):
            yield f"w{i:0{width}d}", (), _tier(rng)
        return
    if shape == "chain":
        prev: tuple[str, ...] = ()
        for i in range(jobs):
            job = f"c{i:0{width}d}"
            yield job, prev, _tier(rng)
            prev = (job,)
        return
    yield from _bank(jobs, rng, width)


def _bank(jobs: int, rng: random.Random, width: int) -> Iterator[GenJob]:
    stages = _bank_stages(jobs, rng)
    # Ids are rebuilt from (stage, index) when picked as upstream, so only the
    # stage table is kept, never the jobs.
    prefix = [f"s{s:02d}_{name}_" for s, (name, _, _) in enumerate(stages)]
    starts = [start for _, start, _ in stages]

    def job_id(i: int) -> str:
        return f"{prefix[bisect.bisect_right(starts, i) - 1]}{i:0{width}d}"

    choices = rng.choices
    for s, (_, start, end) in enumerate(stages):
        last_stage = s == len(stages) - 1
        prev_start, prev_end = (stages[s - 1][1], stages[s - 1][2]) if s else (0, 0)
        for i in range(start, end):
            tier = "critical" if s == 0 or last_stage else _tier(rng)
            if s == 0:
                yield f"{prefix[0]}{i:0{width}d}", (), tier
                continue
            want = min(choices((1, 2, 3), _DEP_COUNT_WEIGHTS)[0], start)
            picked: set[int] = set()
            tries = 0
            while len(picked) < want and tries < 20:
                tries += 1
                if s == 1 or rng.random() < _SAME_STAGE_SHARE:
                    picked.add(rng.randrange(prev_start, prev_end))
                else:
                    picked.add(rng.randrange(0, prev_start))
            deps = tuple(job_id(u) for u in sorted(picked))
            yield f"{prefix[s]}{i:0{width}d}", deps, tier


def _command_for(template: str, job: str) -> str:
    return template.replace("{job}", job) if "{job}" in template else template


def write_plan(
    path: str | Path,
    jobs: int,
    shape: Shape,
    seed: int,
    job_type: Literal["shell", "noop"] = "shell",
    command: str | None = None,
    pool: str | None = None,
    style: Style = "flow",
) -> None:
    """Write a synthetic plan, streaming (memory stays flat).

    Args:
        path: the YAML file to write.
        jobs: how many jobs.
        shape: `bank` (layered end-of-day run), `wide` (independent) or `chain`.
        seed: the same seed writes the same plan.
        job_type: `shell` runs `command`; `noop` jobs run nothing.
        command: the shell command of every job (default `true`); `{job}` in
            it is replaced by the job's id.
        pool: the pool every job runs in (written under `defaults`).
        style: `flow` writes one job a line; `block` one key a line, each
            upstream id on its own `- id` line.

    Raises:
        ValueError: bad `jobs`, `shape`, `job_type`, `command` or `style`.
        OSError: the file cannot be written.
    """
    if job_type == "shell" and command is not None and not command.strip():
        raise ValueError("the command is empty: a shell job needs one (or write --type noop jobs)")
    if job_type not in ("shell", "noop"):
        raise ValueError(f"unknown job type '{job_type}'; use shell or noop")
    if style not in STYLES:
        raise ValueError(f"unknown style '{style}'; use one of: {', '.join(STYLES)}")
    template = command if command is not None else DEFAULT_COMMAND
    fixed = None if "{job}" in template else json.dumps(template)
    with open(path, "w", encoding="utf-8", buffering=1 << 20) as out:
        out.write(f"# wloadctl gen --jobs {jobs} --shape {shape} --seed {seed}\n")
        out.write(f"name: {shape}-{jobs}-s{seed}\n")
        defaults = (["type: noop"] if job_type == "noop" else []) + ([f"pool: {pool}"] if pool else [])
        if defaults:
            out.write(f"defaults: {{{', '.join(defaults)}}}\n")
        out.write("jobs:\n")
        write = out.write
        if style == "block":
            for job, deps, tier in iter_jobs(jobs, shape, seed):
                text = f"  {job}:\n"
                if job_type == "shell":
                    text += f"    command: {fixed or json.dumps(_command_for(template, job))}\n"
                if deps:
                    text += "    depends_on:\n" + "".join(f"      - {d}\n" for d in deps)
                if tier != "standard":
                    text += f"    sla: {tier}\n"
                if text.count("\n") == 1:
                    text = f"  {job}: {{}}\n"
                write(text)
            return
        for job, deps, tier in iter_jobs(jobs, shape, seed):
            parts = []
            if job_type == "shell":
                parts.append(
                    f"command: {fixed or json.dumps(_command_for(template, job))}"
                )
            if deps:
                parts.append(f"depends_on: [{', '.join(deps)}]")
            if tier != "standard":
                parts.append(f"sla: {tier}")
            write(f"  {job}: {{{', '.join(parts)}}}\n")


def _ninja_path(job: str, stamps: str) -> str:
    return f"{stamps}/{job}".replace("$", "$$").replace(" ", "$ ").replace(":", "$:")


def write_ninja(
    path: str | Path,
    jobs: int,
    shape: Shape,
    seed: int,
    command: str | None = None,
    stamp_dir: str = ".stamps",
) -> None:
    """Write a build.ninja with the DAG and commands of `write_plan(jobs, shape, seed)`.

    Each job is a build edge that runs its command and then touches a stamp
    file under `stamp_dir`, so `ninja -j N` runs every command once, after the
    commands it depends on. Run it in the file's directory.

    Args:
        path: the ninja file to write.
        jobs: how many jobs.
        shape: as for write_plan.
        seed: as for write_plan.
        command: as for write_plan (`{job}` is replaced by the job id).
        stamp_dir: where stamp files go, relative to where ninja runs.
    """
    template = command if command is not None else DEFAULT_COMMAND
    with open(path, "w", encoding="utf-8", buffering=1 << 20) as out:
        out.write(
            f"# same DAG as: wloadctl gen --jobs {jobs} --shape {shape} --seed {seed}\n"
        )
        out.write(
            "rule job\n  command = ( $cmd ) && touch $out\n  description = $job\n\n"
        )
        write = out.write
        for job, deps, _ in iter_jobs(jobs, shape, seed):
            inputs = " ".join(_ninja_path(d, stamp_dir) for d in deps)
            cmd = _command_for(template, job).replace("$", "$$")
            write(
                f"build {_ninja_path(job, stamp_dir)}: job"
                f"{' | ' + inputs if deps else ''}\n"
                f"  cmd = {cmd}\n  job = {job}\n"
            )


def _make_path(job: str, stamps: str) -> str:
    return f"{stamps}/{job}".replace("$", "$$").replace(":", "\\:").replace(" ", "\\ ")


def write_makefile(
    path: str | Path,
    jobs: int,
    shape: Shape,
    seed: int,
    command: str | None = None,
    stamp_dir: str = ".stamps",
) -> None:
    """Write a Makefile with the DAG and commands of `write_plan(jobs, shape, seed)`.

    Each job is a stamp-file target whose recipe runs the command and then
    touches the stamp, so `make -j N` runs every command once, in dependency
    order. Run it in the file's directory.

    Args:
        path: the Makefile to write.
        jobs: how many jobs.
        shape: as for write_plan.
        seed: as for write_plan.
        command: as for write_plan (`{job}` is replaced by the job id).
        stamp_dir: where stamp files go, relative to where make runs.
    """
    template = command if command is not None else DEFAULT_COMMAND
    marker = f"{stamp_dir}/.dir"
    with open(path, "w", encoding="utf-8", buffering=1 << 20) as out:
        out.write(
            f"# same DAG as: wloadctl gen --jobs {jobs} --shape {shape} --seed {seed}\n"
        )
        out.write(
            f".DEFAULT_GOAL := all\n.PHONY: all\n"
            f"{marker}:\n\t@mkdir -p {stamp_dir} && touch $@\n"
        )
        write = out.write
        for job, deps, _ in iter_jobs(jobs, shape, seed):
            target = _make_path(job, stamp_dir)
            inputs = " ".join(_make_path(d, stamp_dir) for d in deps)
            cmd = _command_for(template, job).replace("$", "$$")
            write(
                f"{target}: {inputs} | {marker}\n"
                f"\t@( {cmd} ) && touch $@\nall: {target}\n"
            )
