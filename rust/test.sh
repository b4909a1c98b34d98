#!/usr/bin/env bash
# The Rust crates' tests, offline, on the host backend (GPU cases skip
# themselves without a device): mdr-sys's ABI check against the headers,
# mdr's host cases, doctests (compile_fail ones included), the examples, and
# `cargo doc` with warnings denied.
# libmdr: MDR_DIR, else pkg-config, else <repo>/build (built here with its
# `mdr` target when missing). Usage: bash rust/test.sh
set -euo pipefail
cd "$(dirname "$0")"
if [ -z "${MDR_DIR:-}" ] && ! pkg-config --exists mdr 2>/dev/null && [ ! -e ../build/libmdr.so ]; then
  echo "== rust: building libmdr in build/ (target mdr)"
  cmake -S .. -B ../build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build ../build -j "$(nproc)" --target mdr >/dev/null
fi
python3 mdr-sys/generate.py --check
cargo test --offline --workspace
cargo run --offline -q --example decode -p mdr
RUSTDOCFLAGS="-D warnings" cargo doc --offline --no-deps --workspace -q
echo "rust: ok"
