#!/usr/bin/env bash
# Build the Rust test binaries and examples against a libmdr (CUDA build)
# and copy them, with libmdr and a runner, into a folder to carry to the GPU
# machine (which has no cargo).
#
#   bash rust/gpu-tests.sh OUT_DIR            # libmdr from MDR_DIR / pkg-config / build/
#   MDR_DIR=$PWD/build-cuda bash rust/gpu-tests.sh rust/gpu-out
#
# On the GPU machine: bash OUT_DIR/run.sh   (exit status 0 when every binary passed)
#                     bash OUT_DIR/run.sh step_cpu   (the CPU figure alone)
set -euo pipefail
out=${1:?usage: gpu-tests.sh OUT_DIR}
# OUT_DIR is relative to where the script is called from, not to rust/.
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")"
export CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=true
json=$(cargo test --offline --release --workspace --no-run --message-format=json 2>/dev/null)
cargo build --offline --release -p mdr --examples -q
bins=$(printf '%s\n' "$json" | python3 -c '
import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"] + " " + m["executable"])')
rm -f "$out"/*.test
while read -r name exe; do
  [ -n "$name" ] && cp "$exe" "$out/$name.test"
done <<< "$bins"
cp target/release/examples/decode target/release/examples/step_cpu "$out/"
lib=$(grep -h "^cargo:lib_dir=" $(ls -t target/release/build/mdr-sys-*/output | head -1) | cut -d= -f2-)
cp -L "$lib"/libmdr.so* "$out/" 2>/dev/null || cp -L "$lib/libmdr.so" "$out/"
cat > "$out/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs every carried Rust test binary, then the example and the CPU figure.
# The binaries find the libmdr.so.0 carried here: LD_LIBRARY_PATH comes
# before their RUNPATH (the build machine's folder), so nothing depends on
# that machine's paths. libmdr's own dependencies (libcudart, libnccl) are
# the GPU machine's; where the loader misses one, the CUDA folders and the
# nvidia-nccl Python package are added.
cd "$(dirname "$0")"
export LD_LIBRARY_PATH=$PWD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# The cases that compile a C twin link -lmdr from the build machine's
# folder, absent here: the compiler also looks in LIBRARY_PATH.
export LIBRARY_PATH=$PWD${LIBRARY_PATH:+:$LIBRARY_PATH}
if ldd ./libmdr.so.0 | grep -q "not found"; then
  nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null || true)
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib $nccl; do
    [ -d "$d" ] && LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
  done
fi
echo "== libmdr: $PWD/libmdr.so.0"
ldd ./libmdr.so.0 | grep -E "cudart|nccl|not found" || true
export NCCL_NVLS_ENABLE=0
# `run.sh step_cpu`: the CPU figure alone (Rust's step against C's on one cache)
if [ "${1:-}" = step_cpu ]; then
  ./step_cpu 20000 1 && ./step_cpu 20000 8
  exit
fi
rc=0
for t in ./*.test; do
  echo "== $t"
  # The abi check compiles C: skip it where there is no cc.
  if [ "$t" = ./abi.test ] && ! command -v cc >/dev/null; then echo "skipped (no cc)"; continue; fi
  # The C twin of the host cases compiles C too; it skips itself without cc.
  "$t" --test-threads=1 --nocapture || rc=1
done
echo "== decode"; ./decode || rc=1
echo "== step_cpu"; ./step_cpu 20000 1 || rc=1
./step_cpu 20000 8 || rc=1
echo "rust gpu run: rc $rc"
exit $rc
RUN
chmod +x "$out/run.sh"
ls -la "$out"
