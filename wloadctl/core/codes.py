"""Integer codes of job states for the engine's hot paths (JobState values, bound once)."""

from __future__ import annotations

from wloadctl.core.states import TERMINAL, JobState

S = JobState
N_STATES = len(JobState)
W, R, Q, RUN = int(S.WAITING), int(S.READY), int(S.QUEUED), int(S.RUNNING)
OK, FAIL, TO, RW = int(S.SUCCEEDED), int(S.FAILED), int(S.TIMED_OUT), int(S.RETRY_WAIT)
HELD, SKIP, CANC, UPF = int(S.HELD), int(S.SKIPPED), int(S.CANCELLED), int(S.UPSTREAM_FAILED)
TERMINAL_FLAGS = bytes(1 if JobState(s) in TERMINAL else 0 for s in range(N_STATES))
"""1 at the index of each terminal state value."""
