// y[t] = x[t] * (1 / sqrt(mean(x[t]^2) + eps)) * weight, as the CPU's
// kvt_rmsnorm orders the two products. One workgroup per token.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = KVT_WG) in;
layout(std430, set = 0, binding = 0) writeonly buffer Y { float y[]; };
layout(std430, set = 0, binding = 1) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 2) readonly buffer G { float g[]; };
layout(push_constant) uniform P { uint n; uint n_tok; float eps; } pc;

void main() {
    uint t = gl_WorkGroupID.x + gl_WorkGroupID.z * gl_NumWorkGroups.x;
    if (t >= pc.n_tok) return; // the whole workgroup: uniform
    uint b = t * pc.n;
    precise float acc = 0.0;
    for (uint c = gl_LocalInvocationID.x; c < pc.n; c += KVT_WG) acc = fma(x[b + c], x[b + c], acc);
    float total = kvt_wg_sum(acc);
    precise float mean = total / float(pc.n);
    precise float scale = 1.0 / sqrt(mean + pc.eps);
    for (uint c = gl_LocalInvocationID.x; c < pc.n; c += KVT_WG) {
        precise float v = x[b + c] * scale;
        precise float o = v * g[c];
        y[b + c] = o;
    }
}
