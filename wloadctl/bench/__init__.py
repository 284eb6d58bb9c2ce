"""`wloadctl bench`: bank-scale figures beside ninja, make and dask."""

from __future__ import annotations

from wloadctl.bench.suite import main

__all__ = ["main"]
