"""The fuzzers' corpora through the real plan loader and record decoders, and a short fuzz run of each.

The corpora in tests/data/fuzz were grown by atheris (`python -m tests.fuzz.targets NAME
tests/data/fuzz/NAME -max_total_time=300`) and kept minimal with `-merge=1`. Every input must
load or be refused with a WloadError. Without atheris, the short run mutates the corpus with a
seeded generator instead, so the targets are still exercised beyond the stored inputs.
"""

from __future__ import annotations

import importlib.util
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fuzz.targets import TARGETS

CORPORA = Path(__file__).parent.parent / "data" / "fuzz"
ROOT = Path(__file__).parent.parent.parent
HAVE_ATHERIS = importlib.util.find_spec("atheris") is not None


def corpus(name: str) -> list[Path]:
    return sorted(p for p in (CORPORA / name).iterdir() if p.is_file())


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_every_corpus_input_loads_or_is_refused_with_a_wload_error(name: str) -> None:
    inputs = corpus(name)
    assert len(inputs) >= 5
    for p in inputs:
        TARGETS[name](p.read_bytes())


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One libFuzzer-like mutation: flip, insert, erase, duplicate a span, or splice in a special byte."""
    b = bytearray(data or b"\0")
    op = rng.randrange(5)
    i = rng.randrange(len(b))
    if op == 0:
        b[i] ^= 1 << rng.randrange(8)
    elif op == 1:
        b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 8)))
    elif op == 2:
        del b[i : i + rng.randrange(1, 16)]
    elif op == 3:
        b[i:i] = b[i : i + rng.randrange(1, 64)] * rng.randrange(1, 4)
    else:
        b[i] = rng.choice(b"\0\xff\x80:-[]{}&*!|>'\"\n\t#%@`")
    return bytes(b)


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_a_short_fuzz_run(name: str, tmp_path: Path) -> None:
    work = tmp_path / name
    shutil.copytree(CORPORA / name, work)
    if HAVE_ATHERIS:
        p = subprocess.run([sys.executable, "-m", "tests.fuzz.targets", name, "-runs=1500", "-max_len=4096",
                            f"-artifact_prefix={tmp_path}/", str(work)], cwd=ROOT, capture_output=True,
                           text=True, timeout=300, env={**os.environ, "WLOADCTL_FUZZ_QUICK": "1"})
        assert p.returncode == 0, p.stderr[-3000:]
        assert "Done 1500 runs" in p.stderr
        return
    # atheris cannot be installed here: mutate the corpus with a seeded generator instead
    rng = random.Random(1201)
    seeds = [p.read_bytes() for p in corpus(name)]
    target = TARGETS[name]
    for _ in range(1500):
        data = rng.choice(seeds)
        for _ in range(rng.randrange(1, 4)):
            data = mutate(data, rng)
        target(data)
