"""Run the wloadctl benchmark from a checkout: `python benchmarks/run.py [--quick] [--out FILE]`."""

from __future__ import annotations

import sys

from wloadctl.bench import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
