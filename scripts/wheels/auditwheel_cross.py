#!/usr/bin/env python3
"""auditwheel for another architecture's wheel: `python3 auditwheel_cross.py <arch> <auditwheel args>`.

auditwheel offers only the build machine's architecture (it asks platform.machine()), so a
cross-built wheel (aarch64 here) could neither be repaired nor shown. Its checks read the ELF
files themselves, whatever their architecture: this runs the same auditwheel (the one installed
with this interpreter) with platform.machine() answering <arch>.
"""

import platform
import sys

from auditwheel.main import main

arch = sys.argv.pop(1)
platform.machine = lambda: arch
sys.argv[0] = "auditwheel"
sys.exit(main())
