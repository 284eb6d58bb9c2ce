"""Where a run's files live in its state directory: logs, checkpoints, results."""

from __future__ import annotations

from pathlib import Path


def log_path(state_dir: Path, run_id: str, job: str, attempt: int) -> Path:
    """Where the output (stdout and stderr) of one attempt of a job goes."""
    return state_dir / "logs" / run_id / f"{job}.{attempt}.log"


def checkpoint_path(state_dir: Path, run_id: str, job: str) -> Path:
    """Where a job keeps its checkpoint token across attempts."""
    return state_dir / "checkpoints" / run_id / job


def result_path(state_dir: Path, run_id: str, job: str, attempt: int) -> Path:
    """Where one attempt of a job may write its result (read by conditions of its dependents)."""
    return state_dir / "results" / run_id / f"{job}.{attempt}"
