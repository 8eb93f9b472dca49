#!/usr/bin/env python3
"""Checks every ELF file in a wheel against the manylinux tag in the wheel's name.

    python3 scripts/wheels/check_symbols.py dist/ringloader-...-manylinux_2_28_x86_64.whl [...]

For each shared object and executable in the wheel (the extension, the native CLI, whatever
`auditwheel repair` vendored into ringloader.libs/):
  * every symbol version it needs from a system library (GLIBC_*, GLIBCXX_*, CXXABI_*, GCC_*,
    ...) must be one the tag's policy lists for that architecture;
  * every library it needs (DT_NEEDED) must be in the policy's allowed list or in the wheel.
The policies are auditwheel's own (its manylinux-policy.json, from the auditwheel that
scripts/build_wheels.sh installs under build/wheel-tools, else .venv's); the ELF data comes from
`readelf` (binutils), which reads every architecture. Prints the newest version each file needs
per library; exits 1 naming each offending file, library and version.
"""

from __future__ import annotations

import glob
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_policies() -> list[dict]:
    for pattern in ("build/wheel-tools/lib/python3*/site-packages/auditwheel/policy/manylinux-policy.json",
                    ".venv/lib/python3*/site-packages/auditwheel/policy/manylinux-policy.json"):
        found = sorted(glob.glob(str(ROOT / pattern)))
        if found:
            return json.loads(Path(found[-1]).read_text())
    sys.exit("check_symbols: auditwheel's manylinux-policy.json not found: run scripts/build_wheels.sh "
             "(it installs auditwheel into build/wheel-tools) or scripts/setup.sh (.venv)")


def wheel_tag(wheel: Path) -> tuple[str, str]:
    """('manylinux_2_28', 'x86_64') from the newest manylinux tag in the file name."""
    tags = re.findall(r"manylinux_(\d+)_(\d+)_(x86_64|aarch64)", wheel.name)
    if not tags:
        sys.exit(f"check_symbols: {wheel.name}: no manylinux_X_Y_<arch> tag in the name")
    major, minor, arch = max(tags, key=lambda t: (int(t[0]), int(t[1])))
    return f"manylinux_{major}_{minor}", arch


def version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))


def needs(path: Path) -> tuple[list[str], dict[str, set[str]]]:
    """(DT_NEEDED libraries, {library: {versions}}) of one ELF file."""
    dyn = subprocess.run(["readelf", "-d", "-W", str(path)], capture_output=True, text=True).stdout
    libs = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn)
    out = subprocess.run(["readelf", "-V", "-W", str(path)], capture_output=True, text=True).stdout
    versions: dict[str, set[str]] = {}
    section = out.split("Version needs section", 1)
    current = None
    for line in (section[1].splitlines() if len(section) > 1 else []):
        m = re.search(r"File: (\S+)", line)
        if m:
            current = m.group(1)
            versions.setdefault(current, set())
            continue
        m = re.search(r"Name: (\S+)", line)
        if m and current:
            versions[current].add(m.group(1))
    return libs, versions


def check(wheel: Path, policies: list[dict]) -> list[str]:
    name, arch = wheel_tag(wheel)
    policy = next((p for p in policies if p["name"] == name), None)
    if policy is None:
        return [f"{wheel.name}: auditwheel knows no policy {name}"]
    allowed_versions = policy["symbol_versions"][arch]  # {"GLIBC": [...], "GLIBCXX": [...], ...}
    # The dynamic loader, which Zig's linker names as a needed library, is in every system.
    allowed_libs = set(policy["lib_whitelist"]) | {"ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}
    errors = []
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(tmp)
        files = [p for p in Path(tmp).rglob("*") if p.is_file() and p.open("rb").read(4) == b"\x7fELF"]
        if not files:
            return [f"{wheel.name}: no ELF file in the wheel"]
        bundled = {p.name for p in files}
        print(f"{wheel.name} ({name}, {arch}):")
        for path in sorted(files):
            rel = path.relative_to(tmp)
            libs, versions = needs(path)
            for lib in libs:
                if lib not in allowed_libs and lib not in bundled:
                    errors.append(f"{rel}: needs {lib}, which is neither allowed by {name} nor in the wheel")
            newest = []
            for lib, vers in sorted(versions.items()):
                if lib in bundled:
                    continue
                for v in vers:
                    prefix, _, number = v.partition("_")  # GLIBC_2.2.5 -> GLIBC, 2.2.5
                    if prefix not in allowed_versions:
                        continue  # not a policy's library (the dynamic loader's own nodes)
                    if number not in allowed_versions[prefix]:
                        errors.append(f"{rel}: needs {v} from {lib}, which {name} does not allow "
                                      f"(newest allowed {prefix}_{max(allowed_versions[prefix], key=version_key)})")
                by_prefix: dict[str, str] = {}
                for v in vers:
                    p = v.partition("_")[0]
                    if p not in by_prefix or version_key(v) > version_key(by_prefix[p]):
                        by_prefix[p] = v
                newest += [f"{lib}:{v}" for v in sorted(by_prefix.values())]
            print(f"  {rel}: needs {', '.join(libs) or 'nothing'}; newest versions {', '.join(newest) or '-'}")
    return errors


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    policies = load_policies()
    errors = []
    for arg in sys.argv[1:]:
        errors += check(Path(arg), policies)
    for e in errors:
        print("check_symbols:", e, file=sys.stderr)
    if not errors:
        print("check_symbols: every ELF file fits its tag")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
