"""``python -m inn`` is the ``inn`` command."""

import sys

from inn.experiment.cli import main

sys.exit(main())
