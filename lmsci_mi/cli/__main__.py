"""Run `python -m lmsci_mi.cli`."""

import sys

from lmsci_mi.cli import main

sys.exit(main())
