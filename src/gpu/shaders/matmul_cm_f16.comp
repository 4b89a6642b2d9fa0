// The tensor-core matmul of f16 weights (VK_NV_cooperative_matrix), opt-in
// (KVT_VK_COOPMAT=1, vk_kernels.c): y[t * ldy + y_off + r] = sum_c w[r][c] *
// f16(x[t * cols + c]) for the rows of one slice, with matmul_w.glsl's push
// constants, bindings and grid, so the host records it as it records
// matmul_wf16. The activations are rounded to f16 (to nearest even, in
// integer code) as the CPU engine rounds them for F16 weights; the products
// and their sums are the device's MMA arithmetic with f32 accumulators.
//
// A workgroup of CM_SUBS subgroups covers CM_SUBS * CM_M rows and CM_WN * CM_N
// tokens (below): subgroup s owns rows s * CM_M .. and CM_WN accumulators of
// CM_M x CM_N. The columns go by in steps of CM_KC = 4 * CM_K: the workgroup
// stages the step's weights (f16 as stored) and activations (rounded to f16)
// in shared memory, zero past the last row, token or column, and each
// subgroup runs the step's 4 MMAs on each accumulator in column order. So
// every output is the same chain of MMAs, k-tile 0 first, whatever the batch
// size, the token's place in its tile or the rows beside it: a token alone
// (padded to CM_N with zero tokens) gets the bits it gets in a prefill, if the
// device's MMA keeps each output's sum to its own row and column, which
// tests/gpu/test_gpu_coopmat.c checks on a device that has the extension.
//
// Rule 2 of common.glsl (no subgroup operations) does not hold here by
// nature: the MMA is a subgroup operation. What the rule protects, an order
// of summation that no split of the work can change, holds as said above.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common.glsl"

// the MMA's shape (a fp16 x fp16 -> fp32 subgroup shape the device lists), the
// token tiles per subgroup, the workgroup's size (CM_SUBS times the device's
// subgroup size, so that it holds CM_SUBS whole subgroups) and CM_SUBS: the
// host makes one pipeline of 1 subgroup and 1 token tile for batches of up to
// CM_N tokens (decode: more workgroups over a matrix's rows) and one of 4
// subgroups and up to 4 token tiles for longer batches (each weight staged
// once for 64 tokens)
layout(constant_id = 0) const uint CM_M = 16;
layout(constant_id = 1) const uint CM_N = 16;
layout(constant_id = 2) const uint CM_K = 16;
layout(constant_id = 3) const uint CM_WN = 1;
layout(local_size_x_id = 4) in;
layout(constant_id = 5) const uint CM_SUBS = 1;
const uint CM_KC = 4 * CM_K;
const uint CM_BM = CM_SUBS * CM_M;
const uint CM_BN = CM_WN * CM_N;

layout(std430, set = 0, binding = 0) writeonly buffer Y { float y[]; };
layout(std430, set = 0, binding = 1) readonly buffer W { uint w[]; };
layout(std430, set = 0, binding = 2) readonly buffer X { float x[]; };
layout(push_constant) uniform P { uint rows; uint cols; uint n_tok; uint ldy; uint y_off; uint sbase; uint xbase; } pc;

shared float16_t sh_a[CM_BM * CM_KC]; // [row][k]: the weights, row-major
shared float16_t sh_b[CM_BN * CM_KC]; // [token][k]: the activations, so B (k x token) is column-major
shared float sh_c[CM_BN * CM_BM];     // [token][row]: the results, as y holds them

// The f16 weight at (row r, column c) of the slice as its bits, 0 past the edge.
uint w_bits(uint r, uint c) {
    if (r >= pc.rows || c >= pc.cols) return 0u;
    uint e = r * pc.cols + c;
    return (w[e >> 1] >> ((e & 1u) * 16u)) & 0xffffu;
}

// The activation of token t at column c rounded to f16, as bits, 0 past the edge.
uint x_bits(uint t, uint c) {
    if (t >= pc.n_tok || c >= pc.cols) return 0u;
    return kvt_f32_to_f16(floatBitsToUint(x[t * pc.cols + c]));
}

// Stages columns c0 .. c0 + CM_KC - 1: two halves at a time, each pair as one
// f16vec2 made from their bits (no conversion, so every value is exact).
void stage(uint r0, uint t0, uint c0, uint nl) {
    for (uint p = gl_LocalInvocationID.x; p < CM_BM * CM_KC / 2; p += nl) {
        uint i = p / (CM_KC / 2), k = (p - i * (CM_KC / 2)) * 2u;
        f16vec2 v = unpackFloat2x16(w_bits(r0 + i, c0 + k) | (w_bits(r0 + i, c0 + k + 1u) << 16));
        sh_a[i * CM_KC + k] = v.x;
        sh_a[i * CM_KC + k + 1u] = v.y;
    }
    for (uint p = gl_LocalInvocationID.x; p < CM_BN * CM_KC / 2; p += nl) {
        uint j = p / (CM_KC / 2), k = (p - j * (CM_KC / 2)) * 2u;
        f16vec2 v = unpackFloat2x16(x_bits(t0 + j, c0 + k) | (x_bits(t0 + j, c0 + k + 1u) << 16));
        sh_b[j * CM_KC + k] = v.x;
        sh_b[j * CM_KC + k + 1u] = v.y;
    }
}

void main() {
    uint r0 = (gl_WorkGroupID.x + gl_WorkGroupID.z * gl_NumWorkGroups.x) * CM_BM;
    uint t0 = gl_WorkGroupID.y * CM_BN, nl = gl_WorkGroupSize.x, s = gl_SubgroupID;
    if (r0 >= pc.rows || t0 >= pc.n_tok) return; // the whole workgroup: uniform
    fcoopmatNV<32, gl_ScopeSubgroup, CM_M, CM_N> acc[CM_WN];
    for (uint j = 0u; j < CM_WN; j++) acc[j] = fcoopmatNV<32, gl_ScopeSubgroup, CM_M, CM_N>(0.0);
    for (uint c0 = 0u; c0 < pc.cols; c0 += CM_KC) {
        stage(r0, t0, c0, nl);
        barrier();
        for (uint kk = 0u; kk < CM_KC; kk += CM_K) {
            fcoopmatNV<16, gl_ScopeSubgroup, CM_M, CM_K> a;
            coopMatLoadNV(a, sh_a, s * CM_M * CM_KC + kk, CM_KC, false);
            for (uint j = 0u; j < CM_WN; j++) {
                if (t0 + j * CM_N >= pc.n_tok) break; // uniform: only zero tokens left
                fcoopmatNV<16, gl_ScopeSubgroup, CM_K, CM_N> b;
                coopMatLoadNV(b, sh_b, j * CM_N * CM_KC + kk, CM_KC, true);
                acc[j] = coopMatMulAddNV(a, b, acc[j]);
            }
        }
        barrier(); // the next step overwrites the staged tiles
    }
    for (uint j = 0u; j < CM_WN; j++) coopMatStoreNV(acc[j], sh_c, j * CM_N * CM_BM + s * CM_M, CM_BM, true);
    barrier();
    for (uint e = gl_LocalInvocationID.x; e < CM_BN * CM_BM; e += nl) { // neighbouring invocations, neighbouring rows
        uint j = e / CM_BM, i = e - j * CM_BM;
        if (r0 + i < pc.rows && t0 + j < pc.n_tok) y[(t0 + j) * pc.ldy + pc.y_off + r0 + i] = sh_c[e];
    }
}
