"""Points the memo of clean JPEG scans (docs/bad-data.md) at a file of the test session's own.

The memo is a file shared by every process of the machine: a suite writing into the user's cache
would fill it with test images, and a run would inherit an earlier run's entries. Called from
the conftest files before anything decodes; subprocesses inherit the variable."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile


def isolate_scan_memo() -> str:
    """Sets RINGLOADER_SCAN_MEMO to a file in a folder removed at exit (once per process)."""
    if os.environ.get("RINGLOADER_SCAN_MEMO_ISOLATED") != str(os.getpid()):
        folder = tempfile.mkdtemp(prefix="ringloader-scan-memo-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        os.environ["RINGLOADER_SCAN_MEMO"] = os.path.join(folder, "clean-scans.bin")
        os.environ["RINGLOADER_SCAN_MEMO_ISOLATED"] = str(os.getpid())
    return os.environ["RINGLOADER_SCAN_MEMO"]
