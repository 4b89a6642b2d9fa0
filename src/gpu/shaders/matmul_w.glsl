// The frame of the weight-matrix matmuls (matmul_wf32, matmul_wf16,
// matmul_wbf16 and the quantized types of matmul_q.glsl): y[t * ldy + y_off + r] = sum_c w[r][c] * x[t * cols + c] for
// the rows of one slice of the matrix. One workgroup per (row, MM_TOKS
// tokens): groups (gx, ceil(n_tok / MM_TOKS), gz) with row = x + z * gx, so a
// weight read once serves MM_TOKS tokens. The includer defines W's binding and
// row_dot(r, t0, nt, acc): invocation l's share of row r's sum for tokens
// t0 .. t0 + nt - 1, each in c order; the shares of each token are summed by
// the fixed tree of kvt_wg_sum. A token's sum never meets another's, so its
// bits do not depend on which tokens share its workgroup, nor on MM_TOKS.
//
// MM_TOKS is a specialization constant: the host makes a pipeline with 8 for
// batches of up to 8 tokens (a decode step keeps few accumulators and little
// shared memory) and, on first use, one with 16 or 32 for longer batches, so a
// prefill reads each weight 2 or 4 times less often (vk_kernels.c picks the
// width the device's shared memory holds).
layout(constant_id = 0) const uint MM_TOKS = 8;

layout(local_size_x = KVT_WG) in;
layout(std430, set = 0, binding = 0) writeonly buffer Y { float y[]; };
#ifndef MM_XQ
layout(std430, set = 0, binding = 2) readonly buffer X { float x[]; };
#endif
// rows and cols of this slice; ldy and y_off place the result; sbase is where
// a quantized slice's block scales start and xbase where the quantized
// activations' scales start (in words)
layout(push_constant) uniform P { uint rows; uint cols; uint n_tok; uint ldy; uint y_off; uint sbase; uint xbase; } pc;

shared float mm_part[MM_TOKS][KVT_WG];

void row_dot(uint r, uint t0, uint nt, inout float acc[MM_TOKS]);

#ifndef MM_XQ
// acc[k] = fma(wv, x of token t0 + k at column c, acc[k]) for k < nt.
void mm_fma(float wv, uint t0, uint nt, uint c, inout float acc[MM_TOKS]) {
    for (uint k = 0u; k < nt; k++) {
        precise float v = fma(wv, x[(t0 + k) * pc.cols + c], acc[k]);
        acc[k] = v;
    }
}
#endif

void main() {
    uint r = gl_WorkGroupID.x + gl_WorkGroupID.z * gl_NumWorkGroups.x;
    uint t0 = gl_WorkGroupID.y * MM_TOKS, l = gl_LocalInvocationID.x;
    if (r >= pc.rows || t0 >= pc.n_tok) return; // the whole workgroup: uniform
    uint nt = min(uint(MM_TOKS), pc.n_tok - t0);
    float acc[MM_TOKS];
    for (uint k = 0u; k < MM_TOKS; k++) acc[k] = 0.0;
    row_dot(r, t0, nt, acc);
    for (uint k = 0u; k < MM_TOKS; k++) mm_part[k][l] = acc[k];
    barrier();
    for (uint s = KVT_WG / 2; s > 0; s >>= 1) { // kvt_wg_sum's tree, for each token
        if (l < s)
            for (uint k = 0u; k < nt; k++) {
                precise float v = mm_part[k][l] + mm_part[k][l + s];
                mm_part[k][l] = v;
            }
        barrier();
    }
    if (l < nt) y[(t0 + l) * pc.ldy + pc.y_off + r] = mm_part[l][0];
}
