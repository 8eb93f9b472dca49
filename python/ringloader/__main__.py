"""``python -m ringloader``: the ``ringloader`` command (see ``ringloader --help``)."""

import sys

from ._cli import main

if __name__ == "__main__":
    sys.exit(main())
