"""``python -m bdlkit``: the command line (what ``torchrun ... -m bdlkit fit ...`` runs)."""

import sys

from bdlkit.cli_commands import main

sys.exit(main())
