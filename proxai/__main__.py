"""``python -m proxai`` is the ``proxai`` command."""

import sys

from .cli import main

sys.exit(main())
