"""``python -m ember.bench``: see ``ember.bench.cli``."""

import sys

from .cli import main

sys.exit(main())
