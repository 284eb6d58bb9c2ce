"""Fuzz targets: plan loading and the queue record decoders, each allowed to fail only with a WloadError.

A target returns normally for valid input and for input refused with a WloadError (a plan
error with its file and line, a protocol error); any other exception, a RecursionError
included, is a finding.
"""

from __future__ import annotations

import os
import sys

from wloadctl.core.planfile import load_plan_bytes
from wloadctl.errors import WloadError
from wloadctl.ipc import protocol as P

DECODERS = (P.decode_tasks, P.decode_results, P.decode_result_log, P.decode_control, P.decode_payload,
            P.unpack_board_header, P.unpack_executor_slot, P.message_type)
"""Every decoder of bytes that arrive from a queue or a segment."""


def plan_target(data: bytes) -> None:
    """Load `data` as a plan file."""
    try:
        load_plan_bytes(data, "fuzz.yaml")
    except WloadError:
        pass


def record_target(data: bytes) -> None:
    """Decode `data` with every record decoder; the first byte also picks a valid header to lead with."""
    candidates = [data]
    if data:
        # Most random bytes fail the magic check: give each decoder a well-formed header as well.
        kind = data[0] % 4
        head = [P.encode_tasks([]), P.encode_results([]), P.encode_control({}), b""][kind]
        candidates.append(head[: P.HEADER.size] + data[1:])
    for blob in candidates:
        for decode in DECODERS:
            try:
                decode(blob)
            except WloadError:
                pass


TARGETS = {"plans": plan_target, "records": record_target}
"""Fuzz target by corpus name (tests/data/fuzz/NAME)."""


def main() -> None:
    """`python -m tests.fuzz.targets plans|records [libFuzzer options] CORPUS_DIR`: run atheris."""
    import atheris

    name = sys.argv.pop(1)
    target = TARGETS[name]
    # Coverage guidance costs a minute of instrumenting at start: the suite's short run
    # (WLOADCTL_FUZZ_QUICK=1) mutates without it; runs that grow the corpus keep it.
    if not os.environ.get("WLOADCTL_FUZZ_QUICK"):
        atheris.instrument_all()
    atheris.Setup(sys.argv, target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
