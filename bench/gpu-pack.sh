#!/usr/bin/env bash
# Packs what bench/gpu.sh needs on a GPU machine that has a Vulkan driver and
# none of kvtier's Debian packages, into one folder small enough to carry
# (the device tool carries at most 64 MiB): stripped copies of kvtier,
# bench_gpu, bench_gpu_mm and the test_gpu_* binaries (bin/), the shared
# libraries they link besides the C library (lib/: cJSON, microhttpd, hiredis,
# sodium, zstd, ...; a CUDA image has few of them), and the Vulkan loader and
# validation layer as .deb files (debs/), and redis-server where this machine
# has it (for T3), all in one compressed file, PACK/kvtier-gpu.tar.gz (about
# 25 MiB; the folder itself would be over 50).
#
# usage: bench/gpu-pack.sh   (BUILD=build, PACK=bench/gpu-carry; LLAMA_VK=DIR adds
#                             llama.cpp's Vulkan llama-bench and llama-server for phase 4; DEBS=bench/gpu-debs
#                             is used when it holds the .deb files, else apt-get download fetches them;
#                             NO_DEBS=1 packs none)
# Then, on the GPU machine, from the tree's root: PACK=bench/gpu-carry bench/gpu.sh
# (gpu.sh takes its binaries, libraries and .deb files from PACK when it is set).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PACK=${PACK:-bench/gpu-carry}
DEBS=${DEBS:-bench/gpu-debs}
LIMIT_MB=${LIMIT_MB:-40}

bins=(kvtier bench_gpu bench_gpu_mm)
for t in "$BUILD"/test_gpu_*; do [ -x "$t" ] && bins+=("$(basename "$t")"); done
for b in "${bins[@]}"; do
  [ -x "$BUILD/$b" ] || { echo "gpu-pack: no $BUILD/$b: build kvtier first (scripts/build.sh $BUILD)" >&2; exit 1; }
done
DEST=$PACK
mkdir -p "$DEST" && rm -f "$DEST/kvtier-gpu.tar.gz"
PACK=$(mktemp -d "${TMPDIR:-/tmp}/kvt-gpu-pack.XXXXXX")
trap 'rm -rf "$PACK"' EXIT
mkdir -p "$PACK/bin" "$PACK/lib" "$PACK/debs"
for b in "${bins[@]}"; do strip -o "$PACK/bin/$b" "$BUILD/$b"; done
# redis-server and redis-cli, when this machine has them, so phase 2 measures T3 there too
extra=()
# LLAMA_VK: a folder with llama.cpp's llama-bench and llama-server built with -DGGML_VULKAN=ON
# (and -DBUILD_SHARED_LIBS=OFF), for gpu.sh's phase 4 (bench/gpu_vs_llama.sh)
if [ -n "${LLAMA_VK:-}" ]; then
  mkdir -p "$PACK/llama"
  for b in llama-bench llama-server; do
    [ -x "$LLAMA_VK/$b" ] || { echo "gpu-pack: no $LLAMA_VK/$b" >&2; exit 1; }
    strip -o "$PACK/llama/$b" "$LLAMA_VK/$b"
    extra+=("$PACK/llama/$b")
  done
fi
for r in redis-server redis-cli; do
  p=$(command -v "$r" || true)
  if [ -n "$p" ]; then cp -L "$p" "$PACK/bin/$r"; extra+=("$PACK/bin/$r"); fi
done

# Every library the binaries resolve here, except the C library's own parts
# (libc, libm, the loader...), which the GPU machine has in a newer version.
glibc='^(libc|libm|libdl|libpthread|librt|libresolv|ld-linux-x86-64|linux-vdso)\.so'
for b in "${bins[@]/#/$BUILD/}" "${extra[@]}"; do ldd "$b"; done | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u |
  while read -r lib; do
    if ! basename "$lib" | grep -Eq "$glibc"; then cp -L "$lib" "$PACK/lib/"; fi
  done
missing=$(for b in "${bins[@]/#/$BUILD/}" "${extra[@]}"; do ldd "$b"; done | grep 'not found' || true)
[ -z "$missing" ] || { echo "gpu-pack: unresolved libraries here: $missing" >&2; exit 1; }

# The Vulkan loader (kvtier opens libvulkan.so.1 at run time) and the validation layer.
shopt -s nullglob
have=("$DEBS"/libvulkan1_*.deb "$DEBS"/vulkan-validationlayers_*.deb)
if [ "${NO_DEBS:-0}" = 1 ]; then : # the GPU machine's own loader, if it has one
elif [ ${#have[@]} -ge 2 ]; then cp "${have[@]}" "$PACK/debs/"
else (cd "$PACK/debs" && apt-get download libvulkan1 vulkan-validationlayers); fi

tar -czf "$DEST/kvtier-gpu.tar.gz" -C "$PACK" $(cd "$PACK" && ls -d bin lib debs llama 2>/dev/null)
mb=$(( ($(stat -c %s "$DEST/kvtier-gpu.tar.gz") + 1048575) / 1048576 ))
echo "gpu-pack: $DEST/kvtier-gpu.tar.gz holds $((${#bins[@]} + ${#extra[@]})) programs, $(ls "$PACK/lib" | wc -l)" \
  "libraries and $(ls "$PACK/debs" | wc -l) .deb files, ${mb} MiB"
if [ "$mb" -gt "$LIMIT_MB" ]; then echo "gpu-pack: over the ${LIMIT_MB} MiB to carry" >&2; exit 1; fi
