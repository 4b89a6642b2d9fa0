// The KV page pool as the KV kernels bind it (kvt_gpu_kv in gpu.h): chunks at
// bindings KV_BIND .. KV_BIND + 3 (unused ones repeat chunk 0), elements f16
// (KV_F16 1, 16-bit storage: one element is written without touching its
// neighbour, which another workgroup may be writing), f32 (KV_F16 0, kept as
// bits), or q8_0 bytes (KV_Q8 1: the chunk as words, read a byte or a half at
// a time, written through atomics so that the other bytes of a word, which
// another workgroup may be writing, are kept). Page p is in chunk p / ppc from
// element (q8_0: byte) (p % ppc) * stride.
#ifndef KV_Q8
#define KV_Q8 0
#endif
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

#if KV_Q8
#define KV_ROW ((pc.head_dim >> 5u) * 34u) // bytes of a row: per 32 values an f16 scale and 32 int8
#else
#define KV_ROW pc.head_dim // elements of a row
#endif

// The element (q8_0: byte) index of the K (kv 0) or V (kv 1) block of kv head g in page p's chunk.
uint kv_block(uint p, uint kv, uint g) {
    return (p % pc.ppc) * pc.stride + ((pc.layer * 2u + kv) * pc.n_head_kv + g) * pc.block * KV_ROW;
}

// Element i of chunk c as stored (f16 bits or f32 bits; q8_0: word i, four bytes).
uint kv_load(uint c, uint i) {
    if (c == 0u) return uint(kv0[i]);
    if (c == 1u) return uint(kv1[i]);
    if (c == 2u) return uint(kv2[i]);
    return uint(kv3[i]);
}

#if !KV_Q8
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

// Where the K row and the V row of slot `slot` of kv head g in page p start,
// for kv_k and kv_v.
uvec2 kv_k_at(uint p, uint g, uint slot) { return uvec2(kv_block(p, 0u, g), slot); }
uint kv_v_at(uint p, uint g, uint slot) { return kv_block(p, 1u, g) + slot * pc.head_dim; }
// Value d of the K row at k (from kv_k_at) or of the V row at v (from kv_v_at),
// in chunk c. A K row is read in runs of KV_K_RUN values that share what
// kv_k_scale(c, k, first value) gives (q8_0: a group's scale; here nothing).
#define KV_K_RUN pc.head_dim
float kv_k_scale(uint c, uvec2 k, uint d0) { return 1.0; }
float kv_k(uint c, uvec2 k, uint d, float s) { return kv_read(c, k.x + d * pc.block + k.y); }
float kv_v(uint c, uint v, uint d) { return kv_read(c, v + d); }

#else
// Byte i of chunk c as a signed value, and the f16 at (even) byte i as an f32.
int kv_i8(uint c, uint i) { return bitfieldExtract(int(kv_load(c, i >> 2u)), int((i & 3u) * 8u), 8); }
float kv_f16(uint c, uint i) { return kvt_f16_to_f32((kv_load(c, i >> 2u) >> ((i & 2u) * 8u)) & 0xffffu); }

// The same starts as for f16/f32 pages, in bytes: a K row is a column of the
// block (the scales [head_dim / 32][block], then the int8 [head_dim][block]),
// a V row is head_dim / 32 groups of a scale and 32 int8.
uvec2 kv_k_at(uint p, uint g, uint slot) { return uvec2(kv_block(p, 0u, g), slot); }
uint kv_v_at(uint p, uint g, uint slot) { return kv_block(p, 1u, g) + slot * KV_ROW; }
// Value d of a row, as the CPU dequantizes it: its group's scale times its
// int8, one f32 product (exact: 11 by 8 significant bits). A K row goes a
// group at a time, its scale s from kv_k_scale.
#define KV_K_RUN 32u
float kv_k_scale(uint c, uvec2 k, uint d0) { return kv_f16(c, k.x + ((d0 >> 5u) * pc.block + k.y) * 2u); }
float kv_k(uint c, uvec2 k, uint d, float s) {
    return s * float(kv_i8(c, k.x + (pc.head_dim >> 5u) * pc.block * 2u + d * pc.block + k.y));
}
float kv_v(uint c, uint v, uint d) {
    uint at = v + (d >> 5u) * 34u;
    return kv_f16(c, at) * float(kv_i8(c, at + 2u + (d & 31u)));
}

// Sets the bytes under mask of word w of chunk c to bits (already in place)
// and keeps the others: an atomic clear, then an atomic set, so two
// invocations writing different bytes of one word both land.
void kv_put(uint c, uint w, uint mask, uint bits) {
    if (c == 0u) atomicAnd(kv0[w], ~mask), atomicOr(kv0[w], bits);
    else if (c == 1u) atomicAnd(kv1[w], ~mask), atomicOr(kv1[w], bits);
    else if (c == 2u) atomicAnd(kv2[w], ~mask), atomicOr(kv2[w], bits);
    else atomicAnd(kv3[w], ~mask), atomicOr(kv3[w], bits);
}
// Word w of chunk c, when no other invocation writes any of its bytes.
void kv_put_word(uint c, uint w, uint v) {
    if (c == 0u) kv0[w] = v;
    else if (c == 1u) kv1[w] = v;
    else if (c == 2u) kv2[w] = v;
    else kv3[w] = v;
}
void kv_put_u8(uint c, uint i, uint b) {
    uint sh = (i & 3u) * 8u;
    kv_put(c, i >> 2u, 0xffu << sh, (b & 0xffu) << sh);
}
void kv_put_u16(uint c, uint i, uint h) { // i even
    uint sh = (i & 2u) * 8u;
    kv_put(c, i >> 2u, 0xffffu << sh, (h & 0xffffu) << sh);
}
#endif
