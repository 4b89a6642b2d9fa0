#!/usr/bin/env bash
# Every shader the build embedded (build/shaders/*.spv) is valid SPIR-V for
# Vulkan 1.1, as spirv-val (spirv-tools) judges it. For the tensor-core matmul
# (matmul_cm_f16, VK_NV_cooperative_matrix) this is the only check CI can make:
# lavapipe cannot run it, so test_gpu_coopmat skips that part there.
set -u
. "${KVT_SRC:?KVT_SRC must point to the source tree}/tests/testutil.sh"
SPV=$(dirname "$BIN")/shaders
command -v spirv-val >/dev/null || { echo "SKIP: no spirv-val (install spirv-tools, scripts/setup.sh)"; exit 77; }
[ -d "$SPV" ] || { echo "SKIP: no $SPV (this build has no Vulkan backend)"; exit 77; }
n=0
for f in "$SPV"/*.spv; do
  check "$(basename "$f") is valid" expect_rc 0 spirv-val --target-env vulkan1.1 "$f"
  n=$((n + 1))
done
check "the tensor-core matmul is among them" test -f "$SPV/matmul_cm_f16.spv"
check "it uses cooperative matrices" grep -aq SPV_NV_cooperative_matrix "$SPV/matmul_cm_f16.spv"
echo "spirv-val: $n shaders"
kvt_test_done test_gpu_spirv
