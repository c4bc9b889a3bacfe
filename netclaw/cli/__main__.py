"""``python -m netclaw.cli``: the same as the ``netclaw`` command."""

import sys

from netclaw.cli import main

sys.exit(main())
