// Included by every kvtier compute shader. The determinism rules they follow,
// so that a result depends only on its own inputs, never on how work is split:
//
// 1. Every accumulation is `precise` and written with an explicit fma(), so the
//    compiler neither fuses nor splits it differently from one build, driver
//    or batch size to the next.
// 2. A reduction is a fixed tree over KVT_WG invocations of one workgroup:
//    invocation l first sums elements l, l + KVT_WG, l + 2*KVT_WG, ... in that
//    order, then the KVT_WG partial sums are halved pairwise through shared
//    memory. It never uses subgroup operations or gl_SubgroupSize, so the
//    order is the same on every device.
// 3. One kernel per op for every batch size: the batch is one more workgroup
//    dimension and only says how many tokens run, never how a token's own sums
//    are ordered. So a decode step (one token) gives bit for bit what the
//    prefill of a longer batch gives for the same token.
#define KVT_WG 64

shared float kvt_part[KVT_WG];

// Sums v over the workgroup with the fixed tree of rule 2; every invocation
// gets the total. Call from uniform control flow.
float kvt_wg_sum(float v) {
    uint l = gl_LocalInvocationID.x;
    kvt_part[l] = v;
    barrier();
    for (uint s = KVT_WG / 2; s > 0; s >>= 1) {
        if (l < s) {
            precise float t = kvt_part[l] + kvt_part[l + s];
            kvt_part[l] = t;
        }
        barrier();
    }
    float total = kvt_part[0];
    barrier(); // kvt_part may be reused after every invocation has read the total
    return total;
}
