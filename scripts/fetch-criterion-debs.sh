#!/bin/bash
# Download Criterion and its runtime dependencies as Debian packages into DIR
# (default .device-deps/criterion), to be unpacked on a GPU machine that has
# no package registry (docs/GPU-MACHINE.md). Run on a Debian machine with one.
# Usage: bash scripts/fetch-criterion-debs.sh [DIR]
set -euo pipefail
dir=${1:-.device-deps/criterion}
mkdir -p "$dir"
cd "$dir"
pkgs="libcriterion3 libcriterion-dev libboxfort-dev libgit2-1.5 libnanomsg5
  libhttp-parser2.9 libmbedcrypto7 libmbedtls14 libmbedx509-1 libssh2-1"
# shellcheck disable=SC2086
apt-get download $pkgs 2>/dev/null || { apt-get update -qq && apt-get download $pkgs; }
ls -1 *.deb
