// out[t][h] = softmax(scale * q[t][h] . k_j) over keys j = lo..pos (meta[4t]),
// times V, reading kv head h / (n_head / n_head_kv) of the pages that the
// token's table (meta[meta[4t + 3] + j / block]) names. One workgroup per
// (head, token): groups (n_head, n_tok). Keys go a block of KVT_WG at a time:
// invocation l scores key j0 + l (a sequential fma dot over head_dim), the
// block's max and sum come from the fixed trees, the running max and sum are
// updated (online softmax), then invocation l owns output dims l, l + KVT_WG,
// ... and adds the block's keys in order: acc = acc * corr + sum p_j * v_j[d].
// With f16 pages q is rounded to f16 first and each p_j before it meets V;
// q8_0 pages (KV_Q8) give their values dequantized, q and p_j staying f32. A
// token's result depends only on its query, its keys and pos. A table entry
// past the pool is a key of weight 0. lo is 0, or with a sliding window of w
// keys (window != 0) pos - w + 1 once pos >= w, as the CPU's sliding layers;
// with softcap != 0 each score s becomes softcap * tanh(s * (1 / softcap))
// before the softmax, as the CPU's soft-capping.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#define KV_BIND 3
#include "kv.glsl"
#include "tanh.glsl"

#define MAX_HEAD_DIM 256
#define DIMS_PER_INV (MAX_HEAD_DIM / KVT_WG)

layout(local_size_x = KVT_WG) in;
layout(std430, set = 0, binding = 0) writeonly buffer O { float o[]; };
layout(std430, set = 0, binding = 1) readonly buffer Q { float q[]; };
layout(std430, set = 0, binding = 2) readonly buffer M { uint meta[]; };

shared float q_s[MAX_HEAD_DIM];
shared float p_s[KVT_WG];    // the block's softmax weights (unnormalised)
shared uint vc_s[KVT_WG];    // the chunk of each key of the block
shared uint vb_s[KVT_WG];    // and the element where its V row starts

// Scores key j (j < n_keys); false for a key whose table entry is outside the pool.
bool score(uint j, uint tab, uint g, out float s) {
    uint ti = tab + j / pc.block, slot = j % pc.block;
    if (ti >= uint(meta.length())) return false;
    uint page = meta[ti];
    if (page >= pc.n_pages) return false;
    uint c = page / pc.ppc;
    uvec2 kb = kv_k_at(page, g, slot);
    precise float dot = 0.0;
    for (uint d0 = 0u; d0 < pc.head_dim; d0 += KV_K_RUN) { // q8_0: a group and its scale at a time
        float ks = kv_k_scale(c, kb, d0);
        for (uint d = d0; d < d0 + KV_K_RUN; d++) dot = fma(q_s[d], kv_k(c, kb, d, ks), dot);
    }
    precise float sc = dot * pc.scale;
    if (pc.softcap != 0.0) {
        precise float inv = 1.0 / pc.softcap;
        precise float a = sc * inv;
        precise float capped = kvt_tanh(a) * pc.softcap;
        sc = capped;
    }
    s = sc;
    vc_s[gl_LocalInvocationID.x] = c;
    vb_s[gl_LocalInvocationID.x] = kv_v_at(page, g, slot);
    return true;
}

void main() {
    uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, l = gl_LocalInvocationID.x;
    if (h >= pc.n_head || t >= pc.n_tok) return; // the whole workgroup: uniform
    uint pos = meta[4u * t], n_keys = pos + 1u, tab = meta[4u * t + 3u], g = h / (pc.n_head / pc.n_head_kv);
    uint lo = pc.window != 0u && pos >= pc.window ? pos - pc.window + 1u : 0u;
    uint qb = (t * pc.n_head + h) * pc.head_dim;
    for (uint d = l; d < pc.head_dim; d += KVT_WG) q_s[d] = KV_F16 != 0 ? kvt_round_f16(q[qb + d]) : q[qb + d];
    barrier();
    float acc[DIMS_PER_INV];
    for (int i = 0; i < DIMS_PER_INV; i++) acc[i] = 0.0;
    float m = 0.0, sum = 0.0;
    for (uint j0 = lo; j0 < n_keys; j0 += KVT_WG) {
        float s = 0.0;
        bool live = j0 + l < n_keys && score(j0 + l, tab, g, s);
        float bmax = kvt_wg_max(live ? s : -3.0e38);
        float m_new = j0 == lo ? bmax : max(m, bmax);
        float corr = j0 == lo ? 0.0 : exp(m - m_new);
        float p = live ? exp(s - m_new) : 0.0;
        float bsum = kvt_wg_sum(p);
        precise float ns = fma(sum, corr, bsum);
        sum = ns;
        m = m_new;
        p_s[l] = KV_F16 != 0 ? kvt_round_f16(p) : p;
        barrier();
        uint nb = min(uint(KVT_WG), n_keys - j0);
        for (int i = 0; i < DIMS_PER_INV; i++) {
            uint d = l + uint(i) * KVT_WG;
            if (d >= pc.head_dim) break;
            precise float a = acc[i] * corr;
            for (uint k = 0u; k < nb; k++)
                if (p_s[k] != 0.0) a = fma(p_s[k], kv_v(vc_s[k], vb_s[k], d), a);
            acc[i] = a;
        }
        barrier(); // p_s, vc_s and vb_s are rewritten by the next block
    }
    for (int i = 0; i < DIMS_PER_INV; i++) {
        uint d = l + uint(i) * KVT_WG;
        if (d >= pc.head_dim) break;
        precise float r = acc[i] / sum;
        o[qb + d] = r;
    }
}
