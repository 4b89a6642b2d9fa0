// SPDX-License-Identifier: MIT
/* The engine side of approximate reuse (src/runtime/blend.c): moving stored
 * K to another position by rotating it, appending pages to a sequence (late
 * reuse appends cached blocks with it too), and
 * recomputing tokens a sequence already holds in place, with the KV deviation
 * of one layer as CacheBlend selects tokens by it. See engine.h. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "engine_impl.h"
#include "kv_quant.h"
#include "ops.h"

/* K of (layer, head g) of page memory pg, all B slots, as f32 [head_dim][B]. */
static void k_block_read(const kvt_engine *e, const uint8_t *pg, int32_t layer, int32_t g, float *kt) {
    const int32_t hd = e->model->hp.head_dim, B = e->p.block_size;
    const uint8_t *kd = pg + kvt_eng_kv_offset(e, layer, 0, g, 0);
    const size_t n = (size_t)hd * (size_t)B;
    if (e->p.kv_dtype == KVT_KV_Q8_0) kvt_kv_q8_dequant_columns(kd, B, B, hd, kt);
    else if (e->p.kv_dtype == KVT_KV_F16) kvt_f16_to_f32_row((const uint16_t *)(const void *)kd, kt, (int64_t)n);
    else memcpy(kt, kd, n * sizeof(float));
}

/* V row of (layer, head g, slot) of page memory pg as f32 (head_dim). */
static void v_row_read(const kvt_engine *e, const uint8_t *pg, int32_t layer, int32_t g, int32_t slot, float *out) {
    const int32_t hd = e->model->hp.head_dim;
    const uint8_t *vd = pg + kvt_eng_kv_offset(e, layer, 1, g, slot);
    if (e->p.kv_dtype == KVT_KV_Q8_0) kvt_kv_q8_dequant_rows(vd, 1, hd, out);
    else if (e->p.kv_dtype == KVT_KV_F16) kvt_f16_to_f32_row((const uint16_t *)(const void *)vd, out, hd);
    else memcpy(out, vd, (size_t)hd * sizeof(float));
}

/* Approximate reuse rewrites pages in place through host pointers; on a
 * device it is refused, and the runtime then computes the tokens instead. */
static int refuse_on_device(const kvt_engine *e, const char *what) {
    return kvt_fail(KVT_EUNSUPPORTED, "%s: approximate reuse runs on the CPU engine only; this engine runs on %s", what,
                    kvt_engine_device_name(e));
}

int kvt_engine_rerope_page(kvt_engine *e, int32_t page, int32_t delta) {
    if (e->gpu) return refuse_on_device(e, "re-rotating a page's keys");
    if (page < 0 || page >= e->p.n_pages || e->refcount[page] != 1)
        return kvt_fail(KVT_EARG, "page %d is not held by one owner alone", page);
    if (delta == 0) return 0;
    const kvt_model *m = e->model;
    const kvt_hparams *hp = &m->hp;
    const int32_t hd = hp->head_dim, B = e->p.block_size, half = hp->rope_dim / 2;
    float *cs = kvt_xmalloc((size_t)half * 2 * sizeof(float)), *sn = cs + half;
    float *cs_alt = kvt_xmalloc((size_t)half * 2 * sizeof(float)), *sn_alt = cs_alt + half;
    float *kt = kvt_xmalloc((size_t)hd * (size_t)B * sizeof(float)), *row = kvt_xmalloc((size_t)hd * sizeof(float));
    /* rope is a rotation by an angle linear in the position (frequency factors
     * and linear scaling only change the slope), so rotating a key roped at p
     * by the angles of delta gives the key roped at p + delta; the attention
     * factor (LongRoPE) scales once, at the first rotation, hence unscaled */
    kvt_eng_rope_angles(m, delta, 0, 1, cs, sn);
    if (hp->rope_base_swa > 0) kvt_eng_rope_angles(m, delta, 1, 1, cs_alt, sn_alt);
    uint8_t *pg = kvt_page_data(e, page);
    for (int32_t l = 0; l < hp->n_layer; l++) {
        const int alt = m->layers[l].alt_rope;
        for (int32_t g = 0; g < hp->n_head_kv; g++) {
            k_block_read(e, pg, l, g, kt);
            for (int32_t t = 0; t < B; t++) {
                for (int32_t d = 0; d < hd; d++) row[d] = kt[(size_t)d * B + t];
                kvt_eng_rope_apply(hp, row, 1, alt ? cs_alt : cs, alt ? sn_alt : sn);
                kvt_eng_put_k_row(e, pg, l, g, t, row);
            }
        }
    }
    free(cs), free(cs_alt), free(kt), free(row);
    return 0;
}

int kvt_seq_append(kvt_engine *e, int32_t seq, const int32_t *pages, int32_t n_pages, int32_t n_tokens) {
    seq_state *st = seq >= 0 && seq < e->p.max_seqs && e->seqs[seq].active ? &e->seqs[seq] : NULL;
    const int32_t B = e->p.block_size;
    if (!st || n_pages < 0 || (n_pages && !pages) || st->len % B)
        return kvt_fail(KVT_EARG, "pages can only be appended to a sequence that ends on a page boundary");
    if ((int64_t)n_pages != ((int64_t)n_tokens + B - 1) / B || n_tokens < 0)
        return kvt_fail(KVT_EARG, "%d tokens do not fill %d pages of %d", n_tokens, n_pages, B);
    if ((int64_t)st->len + n_tokens > e->p.n_ctx)
        return kvt_fail(KVT_ELIMIT, "%d + %d tokens exceed the context of %d", st->len, n_tokens, e->p.n_ctx);
    for (int32_t i = 0; i < n_pages; i++)
        if (pages[i] < 0 || pages[i] >= e->p.n_pages || e->refcount[pages[i]] < 1)
            return kvt_fail(KVT_EARG, "page %d is not allocated", pages[i]);
    for (int32_t i = 0; i < n_pages; i++) {
        st->pages[st->n_pages++] = pages[i];
        e->refcount[pages[i]]++;
    }
    st->len += n_tokens;
    return 0;
}

int kvt_seq_append_pages(kvt_engine *e, int32_t seq, const int32_t *pages, int32_t n_pages) {
    return kvt_seq_append(e, seq, pages, n_pages, n_pages * e->p.block_size);
}

/* The K and V rows of chunk token i's slot for layer l, every kv head, as
 * stored (f32, kv_dim each). kt: (head_dim, B) scratch. */
static void slot_read(const kvt_engine *e, int32_t l, int32_t i, float *k, float *v, float *kt) {
    const kvt_hparams *hp = &e->model->hp;
    const int32_t hd = hp->head_dim, B = e->p.block_size, slot = e->tslot[i];
    const uint8_t *pg = kvt_page_data_const(e, e->tpage[i]);
    for (int32_t g = 0; g < hp->n_head_kv; g++) {
        k_block_read(e, pg, l, g, kt);
        for (int32_t d = 0; d < hd; d++) k[(size_t)g * hd + d] = kt[(size_t)d * B + slot];
        v_row_read(e, pg, l, g, slot, v + (size_t)g * hd);
    }
}

/* Stores chunk token i's fresh K/V of layer l and returns the squared
 * distance between them and what the slot held, both as stored (so a token
 * whose K/V were already exact measures 0). buf: 4 * kv_dim + head_dim * B floats. */
static float store_deviation(kvt_engine *e, int32_t l, int32_t i, float *buf) {
    const size_t kd = (size_t)e->kv_dim;
    float *k0 = buf, *v0 = buf + kd, *k1 = buf + 2 * kd, *v1 = buf + 3 * kd, *kt = buf + 4 * kd;
    slot_read(e, l, i, k0, v0, kt);
    kvt_eng_store_kv(e, l, i);
    slot_read(e, l, i, k1, v1, kt);
    double dev = 0;
    for (size_t j = 0; j < kd; j++) {
        double dk = (double)k1[j] - k0[j], dv = (double)v1[j] - v0[j];
        dev += dk * dk + dv * dv;
    }
    return (float)dev;
}

int kvt_engine_recompute(kvt_engine *e, int32_t seq, const int32_t *tokens, const int32_t *pos, int32_t n,
                         int32_t dev_layer, float *dev) {
    if (e->gpu) return refuse_on_device(e, "recomputing tokens in place");
    const kvt_hparams *hp = &e->model->hp;
    const int32_t B = e->p.block_size;
    const seq_state *st = seq >= 0 && seq < e->p.max_seqs && e->seqs[seq].active ? &e->seqs[seq] : NULL;
    if (!st || n < 0 || (n && (!tokens || !pos))) return kvt_fail(KVT_EARG, "invalid recompute request");
    if (dev && (dev_layer < 0 || dev_layer >= hp->n_layer))
        return kvt_fail(KVT_EARG, "layer %d is outside the model's %d", dev_layer, hp->n_layer);
    for (int32_t i = 0; i < n; i++) {
        if (pos[i] < 0 || pos[i] >= st->len || (i && pos[i] <= pos[i - 1]))
            return kvt_fail(KVT_EARG, "recompute positions must ascend within the sequence's %d tokens", st->len);
        if (tokens[i] < 0 || tokens[i] >= hp->n_vocab)
            return kvt_fail(KVT_EARG, "token %d is outside the vocabulary of %d", tokens[i], hp->n_vocab);
        if (e->refcount[st->pages[pos[i] / B]] != 1)
            return kvt_fail(KVT_EARG, "position %d lies in a shared page, which is never written", pos[i]);
    }
    float *buf = dev ? kvt_xmalloc((4 * (size_t)e->kv_dim + (size_t)hp->head_dim * (size_t)B) * sizeof(float)) : NULL;
    for (int32_t c0 = 0; c0 < n; c0 += e->p.n_batch) {
        const int32_t nc = KVT_MIN(e->p.n_batch, n - c0);
        for (int32_t i = 0; i < nc; i++) {
            const int32_t p = pos[c0 + i];
            e->tseq[i] = seq;
            e->pos[i] = p;
            e->tpage[i] = st->pages[p / B];
            e->tslot[i] = p % B;
            kvt_wmat_row_f32(&e->model->tok_embd, tokens[c0 + i], e->x + (int64_t)i * hp->n_embd);
        }
        kvt_eng_chunk_begin(e, nc);
        if (!dev) {
            kvt_eng_layers(e, nc, 0, hp->n_layer);
            continue;
        }
        /* the layers below dev_layer in full, then dev_layer's fresh K/V
         * measured against what the slots hold and stored in their place */
        kvt_eng_layers(e, nc, 0, dev_layer);
        kvt_eng_layer_qkv(e, dev_layer, nc);
        for (int32_t i = 0; i < nc; i++) dev[c0 + i] = store_deviation(e, dev_layer, i, buf);
    }
    free(buf);
    return 0;
}
