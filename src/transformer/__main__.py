"""``python -m transformer`` (and ``torchrun -m transformer``) runs the command line."""

import sys

from .cli import main

sys.exit(main())
