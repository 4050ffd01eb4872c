"""``python -m inn`` is the ``inn`` command."""

import sys

from inn.cli import main

sys.exit(main())
