"""`python -m wloadctl.bench`: the benchmark without the `wloadctl` command."""

from __future__ import annotations

import sys

from wloadctl.bench.suite import main

sys.exit(main())
