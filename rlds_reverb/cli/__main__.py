"""`python -m rlds_reverb.cli ...`: the same as the `rlds-reverb` program."""

import sys

from rlds_reverb.cli.app import run

sys.exit(run())
