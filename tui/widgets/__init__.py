"""The console's widgets, grouped by the screen area they fill."""

from __future__ import annotations
