"""The console's screens: the main view, a job's detail, and the dialogs."""

from __future__ import annotations
