"""``python -m ringloader.bench``: the comparison's command line (:func:`ringloader.bench.main`)."""

import sys

from . import main

sys.exit(main())
