// The frame of the weight-matrix matmuls (matmul_wf32, matmul_wf16,
// matmul_wbf16 and the quantized types of matmul_q.glsl): y[t * ldy + y_off + r] = sum_c w[r][c] * x[t * cols + c] for
// the rows of one slice of the matrix. One workgroup per (MM_ROWS rows,
// MM_TOKS tokens): groups (gx, ceil(n_tok / MM_TOKS), gz) with first row
// (x + z * gx) * MM_ROWS, so a weight read once serves MM_TOKS tokens and an
// activation read once serves MM_ROWS rows. The includer defines W's binding
// and row_dot(r0, nr, t0, nt, acc): invocation l's share of the sums of rows
// r0 .. r0 + nr - 1 for tokens t0 .. t0 + nt - 1, acc[i * MM_TOKS + k] for
// row r0 + i and token t0 + k, each in c order; the shares of each (row,
// token) are summed by the fixed tree of kvt_wg_sum. One output's sum never
// meets another's, so its bits do not depend on which rows or tokens share
// its workgroup, nor on MM_ROWS or MM_TOKS.
//
// MM_TOKS and MM_ROWS are specialization constants: the host makes a pipeline
// with 8 tokens for batches of up to 8 (a decode step) and, on first use, one
// with 16 or 32 for longer batches, so a prefill reads each weight 2 or 4 times
// less often; each with the rows kvt_gpu_info gives it (vk_kernels.c picks what
// the device's shared memory holds). MM_ROWS * MM_TOKS accumulators per
// invocation, and as many trees of KVT_WG floats in shared memory.
layout(constant_id = 0) const uint MM_TOKS = 8;
layout(constant_id = 1) const uint MM_ROWS = 1;
const uint MM_RT = MM_ROWS * MM_TOKS;

layout(local_size_x = KVT_WG) in;
layout(std430, set = 0, binding = 0) writeonly buffer Y { float y[]; };
#ifndef MM_XQ
layout(std430, set = 0, binding = 2) readonly buffer X { float x[]; };
#endif
// rows and cols of this slice; ldy and y_off place the result; sbase is where
// a quantized slice's block scales start and xbase where the quantized
// activations' scales start (in words)
layout(push_constant) uniform P { uint rows; uint cols; uint n_tok; uint ldy; uint y_off; uint sbase; uint xbase; } pc;

// The trees' floats as their bits (the K types of matmul_q.glsl first use it
// for their integer shares, so both fit the same shared memory).
shared uint mm_part[MM_RT][KVT_WG];

void row_dot(uint r0, uint nr, uint t0, uint nt, inout float acc[MM_RT]);

#ifndef MM_XQ
// acc[i * MM_TOKS + k] = fma(wv[i], x of token t0 + k at column c, that acc)
// for i < nr, k < nt: each activation read once for the nr rows.
void mm_fma(float wv[MM_ROWS], uint nr, uint t0, uint nt, uint c, inout float acc[MM_RT]) {
    for (uint k = 0u; k < nt; k++) {
        float xv = x[(t0 + k) * pc.cols + c];
        for (uint i = 0u; i < nr; i++) {
            precise float v = fma(wv[i], xv, acc[i * MM_TOKS + k]);
            acc[i * MM_TOKS + k] = v;
        }
    }
}
#endif

void main() {
    uint r0 = (gl_WorkGroupID.x + gl_WorkGroupID.z * gl_NumWorkGroups.x) * MM_ROWS;
    uint t0 = gl_WorkGroupID.y * MM_TOKS, l = gl_LocalInvocationID.x;
    if (r0 >= pc.rows || t0 >= pc.n_tok) return; // the whole workgroup: uniform
    uint nr = min(uint(MM_ROWS), pc.rows - r0), nt = min(uint(MM_TOKS), pc.n_tok - t0);
    float acc[MM_RT];
    for (uint a = 0u; a < MM_RT; a++) acc[a] = 0.0;
    row_dot(r0, nr, t0, nt, acc); // ends with a barrier where it used mm_part
    for (uint i = 0u; i < nr; i++)
        for (uint k = 0u; k < nt; k++) mm_part[i * MM_TOKS + k][l] = floatBitsToUint(acc[i * MM_TOKS + k]);
    barrier();
    for (uint s = KVT_WG / 2; s > 0; s >>= 1) { // kvt_wg_sum's tree, for each (row, token)
        if (l < s)
            for (uint i = 0u; i < nr; i++)
                for (uint k = 0u; k < nt; k++) {
                    uint a = i * MM_TOKS + k;
                    precise float v = uintBitsToFloat(mm_part[a][l]) + uintBitsToFloat(mm_part[a][l + s]);
                    mm_part[a][l] = floatBitsToUint(v);
                }
        barrier();
    }
    for (uint j = l; j < nr * nt; j += KVT_WG) { // j = k * nr + i: neighbouring invocations, neighbouring rows
        uint k = j / nr, i = j - k * nr;
        y[(t0 + k) * pc.ldy + pc.y_off + r0 + i] = uintBitsToFloat(mm_part[i * MM_TOKS + k][0]);
    }
}
