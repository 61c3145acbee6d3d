"""``python -m ember.conformance``: see ``_cli``."""

import sys

from ._cli import main

sys.exit(main())
