#!/usr/bin/env bash
# The GPU layer on a machine that has a Vulkan driver (e.g. NVIDIA's, which
# installs its own ICD) but none of kvtier's Debian packages: it unpacks the
# Vulkan loader and validation layer carried along as .deb files, lists the
# devices, and runs the GPU tests, writing each phase's results to $OUT as it
# goes (so a run cut short still leaves what it did).
#
# Before leaving a machine that has the packages (Debian/Ubuntu), fetch the
# .deb files (no root needed) into the folder DEBS names:
#   mkdir -p bench/gpu-debs && (cd bench/gpu-debs && apt-get download libvulkan1 vulkan-validationlayers)
# and carry that folder and the build folder (kvtier and the test_gpu_* binaries) with
# the tree (both are ignored by git).
# Without .deb files it uses the machine's own loader and layers, if any.
#
# usage: bench/gpu.sh   (BUILD=build, DEBS=bench/gpu-debs, OUT=bench/out/gpu by default;
#                        VK_ICD_FILENAMES picks a driver, as the loader reads it)
# Numbers only; it never passes or fails on time. Exit status: 0 when every
# phase that ran passed, 1 otherwise (summary.txt says which).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DEBS=${DEBS:-bench/gpu-debs}
OUT=${OUT:-bench/out/gpu}
mkdir -p "$OUT"
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
failed=0
note() { echo "$*" | tee -a "$SUMMARY"; }
# phase NAME COMMAND...: runs it into $OUT/NAME.txt, records its exit status at once
phase() {
  local name=$1 rc=0; shift
  "$@" >"$OUT/$name.txt" 2>&1 || rc=$?
  case $rc in
  0) note "$name: ok" ;;
  77) note "$name: skipped ($(grep -i skip "$OUT/$name.txt" | tail -1))" ;;
  *) note "$name: FAILED (exit $rc; see $OUT/$name.txt)"; failed=1 ;;
  esac
  return 0
}

# 1. the machine
{
  date -u
  uname -a
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  echo "ICD files:"; ls /usr/share/vulkan/icd.d /etc/vulkan/icd.d 2>/dev/null
  echo "VK_ICD_FILENAMES=${VK_ICD_FILENAMES:-}"
} >"$OUT/machine.txt" 2>&1
note "machine: $(uname -srm), see $OUT/machine.txt"

# 2. the carried loader and validation layer, unpacked into a private root
unpack_deb() { # unpack_deb FILE DIR: with dpkg-deb, else ar and tar
  if command -v dpkg-deb >/dev/null; then dpkg-deb -x "$1" "$2"; return; fi
  local t; t=$(mktemp -d)
  (cd "$t" && ar x "$(realpath "$1")" && tar -xf data.tar.* -C "$2") || return 1
  rm -rf "$t"
}
shopt -s nullglob
debs=("$DEBS"/*.deb)
if [ ${#debs[@]} -gt 0 ]; then
  ROOT=$OUT/vulkan-root
  rm -rf "$ROOT" && mkdir -p "$ROOT"
  ok=1
  for d in "${debs[@]}"; do unpack_deb "$d" "$ROOT" >>"$OUT/unpack.txt" 2>&1 || ok=0; done
  libdir=$(dirname "$(find "$ROOT" -name 'libvulkan.so.1' | head -1)")
  layers=$(dirname "$(find "$ROOT" -name 'VkLayer_khronos_validation.json' | head -1)")
  [ -n "$libdir" ] && [ "$libdir" != . ] || ok=0
  export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  # the layer manifest names its library without a path: the loader finds it on LD_LIBRARY_PATH
  [ "$layers" != . ] && export VK_LAYER_PATH=$layers
  if [ $ok = 1 ]; then note "unpack: ok (${#debs[@]} .deb files; loader in $libdir, layers in ${VK_LAYER_PATH:-none})"
  else note "unpack: FAILED (see $OUT/unpack.txt)"; failed=1; fi
else
  note "unpack: no .deb files in $DEBS, using the machine's own Vulkan loader and layers"
fi

# 3. the devices, as kvtier sees them (exit 1: none, and why)
phase devices "$BUILD/kvtier" info --devices
sed 's/^/  /' "$OUT/devices.txt" | tee -a "$SUMMARY"

# 4. the GPU tests, with the validation layer on (any message fails them)
for t in test_gpu_device test_gpu_kernels; do
  if [ -x "$BUILD/$t" ]; then
    KVT_VK_VALIDATION=1 phase "$t" "$BUILD/$t"
    grep -h '^gpu' "$OUT/$t.txt" | sed 's/^/  /' | tee -a "$SUMMARY"
  else
    note "$t: FAILED (no $BUILD/$t: build kvtier first)"; failed=1
  fi
done
note "gpu.sh: $([ $failed = 0 ] && echo ok || echo FAILED); results in $OUT"
exit $failed
