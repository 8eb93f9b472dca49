"""``python -m ringloader.bench``: the comparison's command line (:func:`.cli.main`)."""

import sys

from .cli import main

sys.exit(main())
