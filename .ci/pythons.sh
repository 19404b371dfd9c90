#!/usr/bin/env bash
# Fetches CPython 3.14 and 3.15 for the tests, from Debian unstable (the
# newest interpreters Debian ships; pyenv gives this machine 3.10-3.13):
#
#   .ci/pythons.sh DIR     then   GMEM_PROF_TEST_PYTHONS=DIR cargo test ...
#
# DIR/root holds the packages unpacked (headers under root/usr/include, for
# collector/tests/python_layouts.rs) and DIR/bin/python3.14 and python3.15
# run them through unstable's own loader and C library, which they need
# (newer than this machine's), without installing anything. Nothing outside
# DIR is touched; apt's lists and downloads stay in DIR too. A DIR that
# already has both interpreters is left as it is.
set -euo pipefail
DIR=$(mkdir -p "$1" && cd "$1" && pwd)
VERSIONS="3.14 3.15"
ok=1
for v in $VERSIONS; do
    "$DIR/bin/python$v" -c pass 2>/dev/null || ok=0
done
[ "$ok" = 1 ] && exit 0

APT="$DIR/apt"
mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial" "$DIR/debs" "$DIR/bin"
# Testing too: an interpreter unstable drops stays there a while longer.
# When one is in neither, the tests that require it fail (loudly): fetch
# it from a suite that has it, or move VERSIONS on.
printf '%s\n' "deb http://deb.debian.org/debian sid main" \
    "deb http://deb.debian.org/debian testing main" >"$APT/sources.list"
opts=(-o "Dir::Etc::sourcelist=$APT/sources.list" -o Dir::Etc::sourceparts=-
      -o "Dir::State::Lists=$APT/lists" -o "Dir::Cache=$APT/cache"
      -o APT::Sandbox::User=root)
apt-get -qq "${opts[@]}" update
packages=(libc6 libexpat1 zlib1g libffi8 libssl3t64 libzstd1 liblzma5 libbz2-1.0)
for v in $VERSIONS; do
    packages+=("python$v-minimal" "libpython$v-minimal" "libpython$v-stdlib" "libpython$v-dev")
done
(cd "$DIR/debs" && rm -f ./*.deb && apt-get -qq "${opts[@]}" download "${packages[@]}")
rm -rf "$DIR/root"
for deb in "$DIR"/debs/*.deb; do
    dpkg-deb -x "$deb" "$DIR/root"
done
LIB="$DIR/root/usr/lib/x86_64-linux-gnu"
for v in $VERSIONS; do
    cat >"$DIR/bin/python$v" <<EOF
#!/bin/sh
exec "$LIB/ld-linux-x86-64.so.2" --library-path "$LIB" "$DIR/root/usr/bin/python$v" "\$@"
EOF
    chmod +x "$DIR/bin/python$v"
    "$DIR/bin/python$v" -c "import ctypes, threading, sys; print('fetched', sys.version.split()[0])"
done
