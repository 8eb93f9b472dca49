#!/usr/bin/env bash
# Fetches Debian (bookworm) source packages into build/wheel-deps/src with `apt-get source`
# and unpacks them (dpkg-source, Debian's patches applied), using a private apt state under
# build/wheel-deps/apt: the host's apt sources and lists are neither needed nor touched.
# Usage: bash scripts/wheels/debian_source.sh <source package>[/<suite>]...
set -euo pipefail
cd "$(dirname "$0")/../.."
APT=$PWD/build/wheel-deps/apt
SRC=$PWD/build/wheel-deps/src
mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial" "$SRC"
printf 'deb-src http://deb.debian.org/debian bookworm main\ndeb-src http://deb.debian.org/debian-security bookworm-security main\n' \
  > "$APT/sources.list"
opts=(-q -o "Dir::Etc::SourceList=$APT/sources.list" -o Dir::Etc::SourceParts=/dev/null
      -o "Dir::State::Lists=$APT/lists" -o "Dir::Cache=$APT/cache" -o Debug::NoLocking=1)
if [ -z "$(find "$APT/lists" -name '*Sources*' -mmin -1440 2>/dev/null | head -n 1)" ]; then
  apt-get "${opts[@]}" update >/dev/null
fi
cd "$SRC"
for pkg in "$@"; do
  # One at a time: a file missing from one mirror must not stop the others.
  apt-get "${opts[@]}" source --download-only "$pkg" >/dev/null 2>&1 ||
    echo "debian_source: apt-get source $pkg: some files were not fetched" >&2
done
for dsc in *.dsc; do
  dir=$(sed -n 's/^Source: //p' "$dsc")-$(sed -n 's/^Version: \([0-9]*:\)\{0,1\}\([^-]*\).*/\2/p' "$dsc" | head -n 1)
  [ -d "$dir" ] || dpkg-source -q -x "$dsc" >/dev/null 2>&1 || true
done
