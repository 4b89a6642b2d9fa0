// Writes token t's K and V rows of one layer, every kv head, into its page
// slot (meta[4t + 1], meta[4t + 2]): one workgroup per token (x + z * gx), the
// rows read as bits so a NaN or subnormal reaches the page as the CPU would
// store it. A page past the pool or a slot past the block is skipped.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#define KV_BIND 3
#include "kv.glsl"

layout(local_size_x = KVT_WG) in;
layout(std430, set = 0, binding = 0) readonly buffer KX { uint kx[]; };
layout(std430, set = 0, binding = 1) readonly buffer VX { uint vx[]; };
layout(std430, set = 0, binding = 2) readonly buffer M { uint meta[]; };

void main() {
    uint t = gl_WorkGroupID.x + gl_WorkGroupID.z * gl_NumWorkGroups.x;
    if (t >= pc.n_tok) return; // the whole workgroup: uniform
    uint page = meta[4u * t + 1u], slot = meta[4u * t + 2u];
    if (page >= pc.n_pages || slot >= pc.block) return;
    uint c = page / pc.ppc, kv_dim = pc.n_head_kv * pc.head_dim;
    for (uint e = gl_LocalInvocationID.x; e < kv_dim; e += KVT_WG) {
        uint g = e / pc.head_dim, d = e % pc.head_dim;
        kv_write(c, kv_block(page, 0u, g) + d * pc.block + slot, kx[t * kv_dim + e]);
        kv_write(c, kv_block(page, 1u, g) + slot * pc.head_dim + d, vx[t * kv_dim + e]);
    }
}
