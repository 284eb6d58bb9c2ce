"""wloadctl: a workload scheduler for batch operations (YAML plans, POSIX queues and shared memory, a console)."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "load_plan"]


def load_plan(path: str):  # type: ignore[no-untyped-def]
    """Load and validate a plan file (see wloadctl.core.planfile.load_plan)."""
    from wloadctl.core.planfile import load_plan as _load

    return _load(path)
