# device-env.sh — sourced, from the repository root, by every script that runs
# on the GPU machines (scripts/device-check.sh and each device call's script
# under bench/results/): NVLink multicast stays off for the script and every
# child (docs/GPU-MACHINE.md), and Criterion comes from
# .device-deps/criterion/*.deb (made by scripts/fetch-criterion-debs.sh,
# carried to the machine) when the machine has none.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [ -d .device-deps/criterion ] && ! pkg-config --exists criterion 2>/dev/null; then
  mkdir -p /tmp/crit && for f in .device-deps/criterion/*.deb; do dpkg -x "$f" /tmp/crit; done
  export CMAKE_PREFIX_PATH=/tmp/crit/usr
  export LD_LIBRARY_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
  export PKG_CONFIG_PATH=/tmp/crit/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=/tmp/crit
fi
