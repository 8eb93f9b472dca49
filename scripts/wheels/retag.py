#!/usr/bin/env python3
"""Gives a cross-built wheel its real platform tag.

    python3 scripts/wheels/retag.py <wheel> <platform tag>   e.g. linux_aarch64

pip builds the wheel with the build machine's interpreter, so the wheel is named for the build
machine (linux_x86_64) although its ELF files are for another architecture. (Asking pip for the
other platform through _PYTHON_HOST_PLATFORM instead would also make it install that platform's
CMake and ninja into the build environment, which cannot run here.) This rewrites the Tag lines
of the .dist-info/WHEEL file, its line in RECORD and the file name, renames an extension whose
name carries the build machine's architecture, and prints the new path;
`auditwheel repair --plat manylinux_2_28_<arch>` then checks the ELF files against that
architecture's policy and gives the manylinux tag.
"""

from __future__ import annotations

import base64
import hashlib
import platform as host
import re
import sys
import zipfile
from pathlib import Path


def main() -> int:
    wheel, platform = Path(sys.argv[1]), sys.argv[2]
    name, version, python, abi, old = wheel.name[:-len(".whl")].split("-")
    out = wheel.with_name(f"{name}-{version}-{python}-{abi}-{platform}.whl")
    with zipfile.ZipFile(wheel) as zin:
        items = [(info, zin.read(info)) for info in zin.infolist()]
    wheel_file = next(i.filename for i, _ in items if re.fullmatch(r"[^/]+\.dist-info/WHEEL", i.filename))
    record_file = wheel_file[:-len("WHEEL")] + "RECORD"
    new_wheel = re.sub(rb"^(Tag: [^\n]*-)" + re.escape(old.encode()) + rb"$", rb"\g<1>" + platform.encode(),
                       dict((i.filename, d) for i, d in items)[wheel_file], flags=re.M)
    digest = base64.urlsafe_b64encode(hashlib.sha256(new_wheel).digest()).rstrip(b"=").decode()
    # The extension's name carries the build machine's architecture where CMake took it from the
    # build machine's interpreter (_C.cpython-311-x86_64-linux-gnu.so): the target's instead.
    old_arch, new_arch = host.machine(), platform.split("_", 1)[1]
    suffix = re.compile(re.escape(f"-{old_arch}-linux-gnu.so") + "$")
    renamed = {i.filename: suffix.sub(f"-{new_arch}-linux-gnu.so", i.filename) for i, _ in items}
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zout:
        for info, data in items:
            if info.filename == wheel_file:
                data = new_wheel
            elif info.filename == record_file:
                data = re.sub(rb"^" + re.escape(wheel_file.encode()) + rb",[^\n]*$",
                              f"{wheel_file},sha256={digest},{len(new_wheel)}".encode(), data, flags=re.M)
                for before, after in renamed.items():
                    if before != after:
                        data = re.sub(rb"^" + re.escape(before.encode()) + rb",", after.encode() + b",", data, flags=re.M)
            info.filename = renamed[info.filename]
            zout.writestr(info, data)
    if out != wheel:
        wheel.unlink()
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
