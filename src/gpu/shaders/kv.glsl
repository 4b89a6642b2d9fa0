// The KV page pool as the KV kernels bind it (kvt_gpu_kv in gpu.h): chunks at
// bindings KV_BIND .. KV_BIND + 3 (unused ones repeat chunk 0), elements f16
// (KV_F16 1, 16-bit storage: one element is written without touching its
// neighbour, which another workgroup may be writing) or f32 (KV_F16 0, kept as
// bits). Page p is in chunk p / ppc from element (p % ppc) * stride.
#if KV_F16
#extension GL_EXT_shader_16bit_storage : require
#define KV_ELEM uint16_t
#else
#define KV_ELEM uint
#endif
layout(std430, set = 0, binding = KV_BIND) buffer KV0 { KV_ELEM kv0[]; };
layout(std430, set = 0, binding = KV_BIND + 1) buffer KV1 { KV_ELEM kv1[]; };
layout(std430, set = 0, binding = KV_BIND + 2) buffer KV2 { KV_ELEM kv2[]; };
layout(std430, set = 0, binding = KV_BIND + 3) buffer KV3 { KV_ELEM kv3[]; };

// layer, the pool's shape, stride (elements between pages of a chunk), ppc
// (pages per chunk), n_pages (the pool: a table entry at or past it is
// skipped), then each kernel's own (attention: n_head, scale, the sliding
// window in keys, 0 for none, and the score soft-cap, 0 for none)
layout(push_constant) uniform P {
    uint layer; uint n_head_kv; uint head_dim; uint block; uint stride; uint ppc; uint n_pages; uint n_tok;
    uint n_head; float scale; uint window; float softcap;
} pc;

// The element index of the K (kv 0) or V (kv 1) block of kv head g in page p's chunk.
uint kv_block(uint p, uint kv, uint g) {
    return (p % pc.ppc) * pc.stride + ((pc.layer * 2u + kv) * pc.n_head_kv + g) * pc.block * pc.head_dim;
}

// Element i of chunk c as stored (f16 bits or f32 bits).
uint kv_load(uint c, uint i) {
    if (c == 0u) return uint(kv0[i]);
    if (c == 1u) return uint(kv1[i]);
    if (c == 2u) return uint(kv2[i]);
    return uint(kv3[i]);
}

float kv_read(uint c, uint i) {
#if KV_F16
    return kvt_f16_to_f32(kv_load(c, i));
#else
    return uintBitsToFloat(kv_load(c, i));
#endif
}

// Stores the f32 with bits u as element i of chunk c, rounded to f16 for f16
// pages (a 16-bit value can live only in the buffer, so each branch converts).
void kv_write(uint c, uint i, uint u) {
#if KV_F16
    u = kvt_f32_to_f16(u);
#endif
    if (c == 0u) kv0[i] = KV_ELEM(u);
    else if (c == 1u) kv1[i] = KV_ELEM(u);
    else if (c == 2u) kv2[i] = KV_ELEM(u);
    else kv3[i] = KV_ELEM(u);
}
