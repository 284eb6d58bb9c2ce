"""`python -m wloadctl` runs the command line."""

import sys

from wloadctl.cli import main

sys.exit(main())
