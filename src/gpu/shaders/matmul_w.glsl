// The frame of the weight-matrix matmuls (matmul_wf32, matmul_wf16,
// matmul_wq8_0): y[t * ldy + y_off + r] = sum_c w[r][c] * x[t * cols + c] for
// the rows of one slice of the matrix. One workgroup per (row, token): groups
// (gx, n_tok, gz) with row = x + z * gx. The includer defines W's binding and
// row_dot(r, xb), invocation l's share of row r's sum (in c order); the shares
// are summed by the fixed tree.
layout(local_size_x = KVT_WG) in;
layout(std430, set = 0, binding = 0) writeonly buffer Y { float y[]; };
layout(std430, set = 0, binding = 2) readonly buffer X { float x[]; };
// rows and cols of this slice; ldy and y_off place the result; sbase is where
// Q8_0 scales start (in words)
layout(push_constant) uniform P { uint rows; uint cols; uint n_tok; uint ldy; uint y_off; uint sbase; } pc;

float row_dot(uint r, uint xb);

void main() {
    uint r = gl_WorkGroupID.x + gl_WorkGroupID.z * gl_NumWorkGroups.x;
    uint t = gl_WorkGroupID.y;
    if (r >= pc.rows) return; // the whole workgroup: uniform
    float total = kvt_wg_sum(row_dot(r, t * pc.cols));
    if (gl_LocalInvocationID.x == 0) y[t * pc.ldy + pc.y_off + r] = total;
}
