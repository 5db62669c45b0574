"""`python -m interview ...`: see interview/cli.py."""

import sys

from interview.cli import main

sys.exit(main())
