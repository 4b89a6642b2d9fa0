// SPDX-License-Identifier: MIT
/* The GPU engine's work: a chunk's forward pass as one recording per few
 * layers, and page I/O as one batched copy per run: straight from and to host
 * memory mapped for the device (T1's arena, the restore stage), other host
 * memory through the staging buffer (a run longer than it goes in a few
 * pieces). engine_gpu.c makes what these use. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "engine_gpu_impl.h"

/* ---- page I/O --------------------------------------------------------------- */

/* Where page p lives: its chunk buffer and byte offset there. */
static kvt_gpu_buf *page_at(const kvt_eng_gpu *g, int32_t p, uint64_t *off) {
    uint32_t c = (uint32_t)p / g->kv.pages_per_chunk;
    *off = (uint64_t)((uint32_t)p % g->kv.pages_per_chunk) * g->kv.page_stride;
    return g->kv.chunk[c];
}

/* Records the copies of n pages between the pool and host buffers mapped for
 * the device, page i at offset off[i] of buf[i] (to_host: pool -> host),
 * grouped by (host buffer, chunk) so each pair is one copy command. */
static int rec_host_copy(kvt_eng_gpu *g, kvt_gpu_buf *const *buf, const int32_t *pages, const uint64_t *off, size_t n,
                         size_t page_bytes, int to_host, kvt_gpu_region *r) {
    uint8_t *done = kvt_xcalloc(n, 1); /* recorded with an earlier host buffer */
    int rc = 0;
    for (size_t i0 = 0; i0 < n && !rc; i0++) {
        if (done[i0]) continue;
        kvt_gpu_buf *hb = buf[i0];
        for (int c = 0; c < g->kv.n_chunks && !rc; c++) {
            size_t m = 0;
            for (size_t i = i0; i < n; i++) {
                uint64_t po;
                if (done[i] || buf[i] != hb || page_at(g, pages[i], &po) != g->kv.chunk[c]) continue;
                r[m++] = (kvt_gpu_region){to_host ? po : off[i], to_host ? off[i] : po, page_bytes};
            }
            if (m)
                rc = to_host ? kvt_gpu_rec_copy(g->d, g->kv.chunk[c], hb, r, m)
                             : kvt_gpu_rec_copy(g->d, hb, g->kv.chunk[c], r, m);
        }
        for (size_t i = i0; i < n; i++) done[i] |= buf[i] == hb;
    }
    free(done);
    return rc;
}

static int submit_io(kvt_eng_gpu *g, kvt_gpu_buf *const *buf, const int32_t *pages, const uint64_t *off, size_t n,
                     size_t page_bytes, int to_host) {
    kvt_gpu_region *r = kvt_xmalloc(n * sizeof *r);
    int rc = kvt_gpu_begin(g->d);
    if (!rc) rc = rec_host_copy(g, buf, pages, off, n, page_bytes, to_host, r);
    free(r);
    if (!rc) rc = kvt_gpu_submit(g->d);
    else kvt_gpu_abort(g->d);
    if (!rc) g->st.io_submits++;
    return rc;
}

void *kvt_eng_gpu_stage(kvt_eng_gpu *g, size_t n, size_t page_bytes) {
    if (n > g->io_pages) return NULL;
    if (!g->user_stage && kvt_gpu_buf_new(g->d, KVT_GPU_STAGING, (uint64_t)g->io_pages * page_bytes, &g->user_stage))
        return NULL;
    return kvt_gpu_buf_host(g->user_stage);
}

/* Host memory mapped for the device, handed out for long-lived stores of
 * pages (T1's arena). Page I/O finds a host buffer's pages in it and copies
 * them straight, so such memory must be one of these buffers; the engine
 * keeps the list (a few buffers: the arena comes in large pieces). */
void *kvt_eng_gpu_host_alloc(kvt_eng_gpu *g, size_t bytes) {
    kvt_gpu_buf *b;
    if (kvt_gpu_buf_new(g->d, KVT_GPU_PINNED, (uint64_t)bytes, &b)) return NULL;
    if (g->n_pinned == g->cap_pinned) {
        g->cap_pinned = g->cap_pinned ? 2 * g->cap_pinned : 8;
        g->pinned = kvt_xrealloc(g->pinned, g->cap_pinned * sizeof *g->pinned);
    }
    g->pinned[g->n_pinned++] = b;
    return kvt_gpu_buf_host(b);
}

void kvt_eng_gpu_host_free(kvt_eng_gpu *g, void *p) {
    for (size_t i = 0; p && i < g->n_pinned; i++)
        if (kvt_gpu_buf_host(g->pinned[i]) == p) {
            kvt_gpu_buf_free(g->pinned[i]);
            g->pinned[i] = g->pinned[--g->n_pinned];
            return;
        }
}

size_t kvt_eng_gpu_host_max(const kvt_eng_gpu *g) {
    uint64_t m = kvt_gpu_max_pinned(g->d);
    return m > SIZE_MAX ? SIZE_MAX : (size_t)m;
}

/* The buffer mapped for the device that holds bytes at host whole (a pinned
 * one or the user stage), with host's offset there; NULL for other memory. */
static kvt_gpu_buf *mapped_at(kvt_eng_gpu *g, const void *host, size_t bytes, uint64_t *off) {
    const uintptr_t h = (uintptr_t)host;
    for (size_t i = 0; i <= g->n_pinned; i++) {
        kvt_gpu_buf *b = i < g->n_pinned ? g->pinned[i] : g->user_stage;
        if (!b) continue;
        const uintptr_t base = (uintptr_t)kvt_gpu_buf_host(b);
        const uint64_t size = kvt_gpu_buf_size(b);
        if (h >= base && h - base <= size && size - (h - base) >= bytes) {
            *off = h - base;
            return b;
        }
    }
    return NULL;
}

/* Long: pages whose host buffers are mapped for the device go straight, the others through io_stage, whose
 * size caps a submission: the first carries every direct page and as many bounced ones as fit, then the rest. */
static int pages_io(kvt_eng_gpu *g, const int32_t *pages, void *const *hosts, size_t n, size_t page_bytes, int out) {
    kvt_gpu_buf **at = kvt_xmalloc(n * sizeof *at), **buf = kvt_xmalloc(n * sizeof *buf);
    uint64_t *at_off = kvt_xmalloc(n * sizeof *at_off), *off = kvt_xmalloc(n * sizeof *off);
    int32_t *pg = kvt_xmalloc(n * sizeof *pg);
    size_t *bounced = kvt_xmalloc(n * sizeof *bounced), n_b = 0;
    for (size_t i = 0; i < n; i++)
        if (!(at[i] = mapped_at(g, hosts[i], page_bytes, &at_off[i]))) bounced[n_b++] = i;
    uint8_t *stage = kvt_gpu_buf_host(g->io_stage);
    int rc = 0;
    for (size_t b0 = 0, first = 1; !rc && (first || b0 < n_b); b0 += g->io_pages, first = 0) {
        size_t m = 0, nb = KVT_MIN((size_t)g->io_pages, n_b - b0);
        for (size_t i = 0; first && i < n; i++)
            if (at[i]) pg[m] = pages[i], buf[m] = at[i], off[m++] = at_off[i];
        for (size_t k = 0; k < nb; k++) {
            pg[m] = pages[bounced[b0 + k]], buf[m] = g->io_stage, off[m++] = (uint64_t)k * page_bytes;
            if (!out) memcpy(stage + (size_t)k * page_bytes, hosts[bounced[b0 + k]], page_bytes);
        }
        rc = submit_io(g, buf, pg, off, m, page_bytes, out);
        for (size_t k = 0; k < nb && !rc && out; k++)
            memcpy(hosts[bounced[b0 + k]], stage + (size_t)k * page_bytes, page_bytes);
    }
    if (!rc) g->st.pages_direct += n - n_b, g->st.pages_bounced += n_b;
    free(at), free(buf), free(at_off), free(off), free(pg), free(bounced);
    return rc;
}

int kvt_eng_gpu_pages_out(kvt_eng_gpu *g, const kvt_page_out *io, size_t n, size_t page_bytes) {
    int32_t *pages = kvt_xmalloc(n * sizeof *pages);
    void **hosts = kvt_xmalloc(n * sizeof *hosts);
    for (size_t i = 0; i < n; i++) pages[i] = io[i].page, hosts[i] = io[i].host;
    int rc = pages_io(g, pages, hosts, n, page_bytes, 1);
    free(pages);
    free(hosts);
    if (!rc) g->st.pages_out += n, g->st.runs_out++;
    return rc ? kvt_fail_prefix(rc, "copying %zu pages out of device memory: ", n) : 0;
}

int kvt_eng_gpu_pages_in(kvt_eng_gpu *g, const kvt_page_in *io, size_t n, size_t page_bytes) {
    int32_t *pages = kvt_xmalloc(n * sizeof *pages);
    void **hosts = kvt_xmalloc(n * sizeof *hosts);
    for (size_t i = 0; i < n; i++) pages[i] = io[i].page, hosts[i] = (void *)(uintptr_t)io[i].host;
    int rc = pages_io(g, pages, hosts, n, page_bytes, 0);
    free(pages);
    free(hosts);
    if (!rc) g->st.pages_in += n, g->st.runs_in++;
    return rc ? kvt_fail_prefix(rc, "copying %zu pages into device memory: ", n) : 0;
}

/* Long: regions grouped by (source chunk, destination chunk), one copy command per pair, one submission. */
int kvt_eng_gpu_pages_copy(kvt_eng_gpu *g, const int32_t *dst, const int32_t *src, size_t n, size_t page_bytes) {
    kvt_gpu_region *r = kvt_xmalloc((n ? n : 1) * sizeof *r);
    int rc = kvt_gpu_begin(g->d);
    for (int cs = 0; !rc && cs < g->kv.n_chunks; cs++)
        for (int cd = 0; !rc && cd < g->kv.n_chunks; cd++) {
            size_t m = 0;
            for (size_t i = 0; i < n; i++) {
                uint64_t so, dof;
                if (dst[i] == src[i] || page_at(g, src[i], &so) != g->kv.chunk[cs] ||
                    page_at(g, dst[i], &dof) != g->kv.chunk[cd])
                    continue;
                r[m++] = (kvt_gpu_region){so, dof, page_bytes};
            }
            if (m) rc = kvt_gpu_rec_copy(g->d, g->kv.chunk[cs], g->kv.chunk[cd], r, m);
        }
    free(r);
    if (!rc) rc = kvt_gpu_submit(g->d);
    else kvt_gpu_abort(g->d);
    if (!rc) g->st.io_submits++, g->st.runs_copy++;
    return rc ? kvt_fail_prefix(rc, "copying %zu pages in device memory: ", n) : 0;
}

/* ---- the forward pass --------------------------------------------------------- */

/* The chunk's inputs into in_stage: embeddings (already in e->x), rope
 * angles (in e->rope_cos/sin) and the token table with each sequence's page
 * table once. */
static void stage_inputs(kvt_engine *e, kvt_eng_gpu *g, int32_t n) {
    const kvt_hparams *hp = &e->model->hp;
    uint8_t *st = kvt_gpu_buf_host(g->in_stage);
    const size_t half = (size_t)hp->rope_dim / 2;
    memcpy(st, e->x, (size_t)n * (size_t)hp->n_embd * sizeof(float));
    memcpy(st + g->off_cs, e->rope_cos, (size_t)n * half * sizeof(float));
    memcpy(st + g->off_sn, e->rope_sin, (size_t)n * half * sizeof(float));
    if (g->alt_stage) {
        uint8_t *alt = kvt_gpu_buf_host(g->alt_stage);
        memcpy(alt, e->rope_cos_alt, (size_t)n * half * sizeof(float));
        memcpy(alt + kvt_gpu_buf_size(g->alt_stage) / 2, e->rope_sin_alt, (size_t)n * half * sizeof(float));
    }
    uint32_t *meta = (uint32_t *)(void *)(st + g->off_meta);
    uint32_t at = KVT_GPU_META_WORDS * (uint32_t)n;
    /* each sequence's table once, at the first of its tokens; tab_of[seq] finds it for the others (0: not yet,
     * as a table always starts past the token entries) */
    uint32_t *tab_of = kvt_xcalloc((size_t)e->p.max_seqs, sizeof *tab_of);
    for (int32_t i = 0; i < n; i++) {
        uint32_t tab = tab_of[e->tseq[i]];
        if (!tab) {
            int32_t np;
            const int32_t *pt = kvt_seq_pages(e, e->tseq[i], &np);
            tab = tab_of[e->tseq[i]] = at;
            for (int32_t p = 0; p < np; p++) meta[at++] = (uint32_t)pt[p];
        }
        uint32_t *m = meta + KVT_GPU_META_WORDS * i;
        m[0] = (uint32_t)e->pos[i], m[1] = (uint32_t)e->tpage[i], m[2] = (uint32_t)e->tslot[i], m[3] = tab;
    }
    free(tab_of);
}

static int rec_inputs(kvt_engine *e, kvt_eng_gpu *g, int32_t n) {
    const kvt_hparams *hp = &e->model->hp;
    const uint64_t half = (uint64_t)hp->rope_dim / 2;
    kvt_gpu_region r = {0, 0, (uint64_t)n * (uint64_t)hp->n_embd * 4};
    int rc = kvt_gpu_rec_copy(g->d, g->in_stage, g->x, &r, 1);
    if (!rc && half) {
        r = (kvt_gpu_region){g->off_cs, 0, (uint64_t)n * half * 4};
        rc = kvt_gpu_rec_copy(g->d, g->in_stage, g->cs, &r, 1);
        r.src_off = g->off_sn;
        if (!rc) rc = kvt_gpu_rec_copy(g->d, g->in_stage, g->sn, &r, 1);
    }
    if (!rc && half && g->alt_stage) {
        r = (kvt_gpu_region){0, 0, (uint64_t)n * half * 4};
        rc = kvt_gpu_rec_copy(g->d, g->alt_stage, g->cs_alt, &r, 1);
        r.src_off = kvt_gpu_buf_size(g->alt_stage) / 2;
        if (!rc) rc = kvt_gpu_rec_copy(g->d, g->alt_stage, g->sn_alt, &r, 1);
    }
    r = (kvt_gpu_region){g->off_meta, 0, (uint64_t)g->meta_words * 4};
    if (!rc) rc = kvt_gpu_rec_copy(g->d, g->in_stage, g->meta, &r, 1);
    if (!rc) rc = kvt_gpu_rec_barrier(g->d);
    return rc;
}

/* q/k/v of layer l from x: the norm, the projections, and what the
 * architecture adds before the KV store (biases, head norms, rope with the
 * layer's angles, the query scale), as the CPU's layer_qkv. */
static int rec_qkv(kvt_engine *e, kvt_eng_gpu *g, int32_t l, uint32_t n) {
    const kvt_hparams *hp = &e->model->hp;
    const gpu_layer *G = &g->L[l];
    const uint32_t D = (uint32_t)hp->n_embd, qd = (uint32_t)e->q_dim, kd = (uint32_t)e->kv_dim,
                   hd = (uint32_t)hp->head_dim, nh = (uint32_t)hp->n_head, nkv = (uint32_t)hp->n_head_kv;
    const int neox = hp->rope_style == KVT_ROPE_NEOX, alt = e->model->layers[l].alt_rope && g->cs_alt;
    kvt_gpu_dev *d = g->d;
    kvt_gpu_kernels *k = g->k;
    int rc = kvt_gpu_rec_rmsnorm(k, g->xb, g->x, G->attn_norm, D, n, hp->rms_eps);
    if (!rc) rc = kvt_gpu_rec_barrier(d);
    if (!rc) rc = kvt_gpu_rec_matmul(k, G->wq, g->q, qd, 0, g->xb, n);
    if (!rc) rc = kvt_gpu_rec_matmul(k, G->wk, g->k_, kd, 0, g->xb, n);
    if (!rc) rc = kvt_gpu_rec_matmul(k, G->wv, g->v, kd, 0, g->xb, n);
    if (!rc) rc = kvt_gpu_rec_barrier(d);
    if (!rc && G->bq) rc = kvt_gpu_rec_add_bias(k, g->q, G->bq, qd, n);
    if (!rc && G->bk) rc = kvt_gpu_rec_add_bias(k, g->k_, G->bk, kd, n);
    if (!rc && G->bv) rc = kvt_gpu_rec_add_bias(k, g->v, G->bv, kd, n);
    if (!rc && (G->bq || G->bk || G->bv)) rc = kvt_gpu_rec_barrier(d);
    /* each head is a row of head_dim: the norm runs in place over n * heads rows */
    if (!rc && G->q_norm) rc = kvt_gpu_rec_rmsnorm(k, g->q, g->q, G->q_norm, hd, n * nh, hp->rms_eps);
    if (!rc && G->k_norm) rc = kvt_gpu_rec_rmsnorm(k, g->k_, g->k_, G->k_norm, hd, n * nkv, hp->rms_eps);
    if (!rc && (G->q_norm || G->k_norm)) rc = kvt_gpu_rec_barrier(d);
    if (!rc && hp->rope_dim > 0) {
        kvt_gpu_buf *cs = alt ? g->cs_alt : g->cs, *sn = alt ? g->sn_alt : g->sn;
        rc = kvt_gpu_rec_rope(k, g->q, cs, sn, nh, hd, (uint32_t)hp->rope_dim, neox, n);
        if (!rc) rc = kvt_gpu_rec_rope(k, g->k_, cs, sn, nkv, hd, (uint32_t)hp->rope_dim, neox, n);
        if (!rc) rc = kvt_gpu_rec_barrier(d);
    }
    if (!rc && hp->q_scale > 0) rc = kvt_gpu_rec_scale(k, g->q, n * qd, hp->q_scale);
    return rc;
}

/* Layer l's attention block: q/k/v, the KV store, attention (the layer's
 * window, the model's soft-cap), the output projection, its post-norm and
 * the residual add. */
static int rec_attn(kvt_engine *e, kvt_eng_gpu *g, int32_t l, uint32_t n) {
    const kvt_hparams *hp = &e->model->hp;
    const gpu_layer *G = &g->L[l];
    const uint32_t D = (uint32_t)hp->n_embd, hd = (uint32_t)hp->head_dim;
    /* with a query scale q is scaled already and the scores are not (as on the CPU) */
    const float scale = hp->q_scale > 0 ? 1.0f : 1.0f / sqrtf((float)hd);
    const uint32_t window = (uint32_t)e->model->layers[l].window;
    kvt_gpu_dev *d = g->d;
    kvt_gpu_kernels *k = g->k;
    int rc = rec_qkv(e, g, l, n);
    /* every token's K/V is in the pages before any attends, as on the CPU */
    if (!rc) rc = kvt_gpu_rec_kv_store(k, &g->kv, (uint32_t)l, g->k_, g->v, g->meta, n);
    if (!rc) rc = kvt_gpu_rec_barrier(d);
    if (!rc)
        rc = kvt_gpu_rec_attention_arch(k, &g->kv, (uint32_t)l, g->att, g->q, g->meta, (uint32_t)hp->n_head, scale,
                                        window, hp->attn_softcap > 0 ? hp->attn_softcap : 0.0f, n);
    if (!rc) rc = kvt_gpu_rec_barrier(d);
    if (!rc) rc = kvt_gpu_rec_matmul(k, G->wo, g->xb, D, 0, g->att, n);
    if (!rc) rc = kvt_gpu_rec_barrier(d);
    if (!rc && G->post_attn_norm) {
        rc = kvt_gpu_rec_rmsnorm(k, g->xb, g->xb, G->post_attn_norm, D, n, hp->rms_eps);
        if (!rc) rc = kvt_gpu_rec_barrier(d);
    }
    if (!rc) rc = kvt_gpu_rec_add(k, g->x, g->xb, n * D);
    if (!rc) rc = kvt_gpu_rec_barrier(d);
    return rc;
}

/* Layer l's feed-forward block: x += post_ffn_norm(W_down (act(W_gate h) * W_up h)), h = ffn_norm(x). */
static int rec_ffn(kvt_engine *e, kvt_eng_gpu *g, int32_t l, uint32_t n) {
    const kvt_hparams *hp = &e->model->hp;
    const gpu_layer *G = &g->L[l];
    const uint32_t D = (uint32_t)hp->n_embd, F = (uint32_t)hp->n_ff;
    kvt_gpu_dev *d = g->d;
    kvt_gpu_kernels *k = g->k;
    int rc = kvt_gpu_rec_rmsnorm(k, g->xb, g->x, G->ffn_norm, D, n, hp->rms_eps);
    if (!rc) rc = kvt_gpu_rec_barrier(d);
    if (!rc) rc = kvt_gpu_rec_matmul(k, G->wg, g->hb, F, 0, g->xb, n);
    if (!rc) rc = kvt_gpu_rec_matmul(k, G->wu, g->hb2, F, 0, g->xb, n);
    if (!rc) rc = kvt_gpu_rec_barrier(d);
    if (!rc)
        rc = hp->ffn_act == KVT_FFN_GELU ? kvt_gpu_rec_gelu_mul(k, g->hb, g->hb2, n * F)
                                         : kvt_gpu_rec_silu_mul(k, g->hb, g->hb2, n * F);
    if (!rc) rc = kvt_gpu_rec_barrier(d);
    if (!rc) rc = kvt_gpu_rec_matmul(k, G->wd, g->xb, D, 0, g->hb, n);
    if (!rc) rc = kvt_gpu_rec_barrier(d);
    if (!rc && G->post_ffn_norm) {
        rc = kvt_gpu_rec_rmsnorm(k, g->xb, g->xb, G->post_ffn_norm, D, n, hp->rms_eps);
        if (!rc) rc = kvt_gpu_rec_barrier(d);
    }
    if (!rc) rc = kvt_gpu_rec_add(k, g->x, g->xb, n * D);
    if (!rc) rc = kvt_gpu_rec_barrier(d);
    return rc;
}

/* One layer's dispatches in order, a barrier between dependent steps. */
static int rec_layer(kvt_engine *e, kvt_eng_gpu *g, int32_t l, uint32_t n) {
    int rc = rec_attn(e, g, l, n);
    return rc ? rc : rec_ffn(e, g, l, n);
}

/* Records the logits of wanted rows w0 .. w0+m-1: the final norm and the
 * output matrix over those rows only, and their copy to out_stage. */
static int rec_logits(kvt_engine *e, kvt_eng_gpu *g, int32_t w0, int32_t m) {
    const kvt_hparams *hp = &e->model->hp;
    const uint64_t rowb = (uint64_t)hp->n_embd * 4, vb = (uint64_t)hp->n_vocab * 4;
    kvt_gpu_region r[64];
    int rc = 0;
    for (int32_t i0 = 0; !rc && i0 < m; i0 += 64) {
        int32_t c = KVT_MIN(64, m - i0);
        for (int32_t i = 0; i < c; i++)
            r[i] = (kvt_gpu_region){(uint64_t)e->wanted[w0 + i0 + i] * rowb, (uint64_t)(i0 + i) * rowb, rowb};
        rc = kvt_gpu_rec_copy(g->d, g->x, g->xw, r, (size_t)c);
    }
    if (!rc) rc = kvt_gpu_rec_barrier(g->d);
    if (!rc) rc = kvt_gpu_rec_rmsnorm(g->k, g->xw2, g->xw, g->out_norm, (uint32_t)hp->n_embd, (uint32_t)m, hp->rms_eps);
    if (!rc) rc = kvt_gpu_rec_barrier(g->d);
    if (!rc) rc = kvt_gpu_rec_matmul(g->k, g->out, g->logits, (uint32_t)hp->n_vocab, 0, g->xw2, (uint32_t)m);
    if (!rc) rc = kvt_gpu_rec_barrier(g->d);
    if (!rc && hp->final_softcap > 0) {
        rc = kvt_gpu_rec_softcap(g->k, g->logits, (uint32_t)m * (uint32_t)hp->n_vocab, hp->final_softcap);
        if (!rc) rc = kvt_gpu_rec_barrier(g->d);
    }
    r[0] = (kvt_gpu_region){0, 0, (uint64_t)m * vb};
    if (!rc) rc = kvt_gpu_rec_copy(g->d, g->logits, g->out_stage, r, 1);
    return rc;
}

/* The logits of wanted rows w0 .. w0+m-1 into logits, as a submission of their own. */
static int logits_pass(kvt_engine *e, kvt_eng_gpu *g, int32_t w0, int32_t m, float *logits) {
    int rc = kvt_gpu_begin(g->d);
    if (!rc) rc = rec_logits(e, g, w0, m);
    if (!rc) rc = kvt_gpu_submit(g->d);
    else kvt_gpu_abort(g->d);
    if (!rc) memcpy(logits, kvt_gpu_buf_host(g->out_stage), (size_t)m * (size_t)e->model->hp.n_vocab * 4);
    return rc;
}

/* Records, after the last layer, the final norm of the chunk's n rows of x
 * into xb (the kernel and weights the logits rows go through, row by row, so
 * a hidden row is the row the output matrix reads) and one copy of the rows
 * want_hidden marks, packed in batch order, to the start of in_stage (whose
 * inputs the layers have read by then). */
static int rec_hidden(kvt_engine *e, kvt_eng_gpu *g, int32_t n, const int8_t *want_hidden) {
    const kvt_hparams *hp = &e->model->hp;
    const uint64_t rowb = (uint64_t)hp->n_embd * 4;
    kvt_gpu_region *r = kvt_xmalloc((size_t)n * sizeof *r);
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++)
        if (want_hidden[i]) r[m] = (kvt_gpu_region){(uint64_t)i * rowb, (uint64_t)m * rowb, rowb}, m++;
    int rc = kvt_gpu_rec_rmsnorm(g->k, g->xb, g->x, g->out_norm, (uint32_t)hp->n_embd, (uint32_t)n, hp->rms_eps);
    if (!rc) rc = kvt_gpu_rec_barrier(g->d);
    if (!rc) rc = kvt_gpu_rec_copy(g->d, g->xb, g->in_stage, r, (size_t)m);
    free(r);
    return rc;
}

/* Partial offload: the device's layers done, the chunk's residual rows go
 * back to the host's x (through the start of in_stage, whose inputs the
 * layers have read by then) for the CPU to run the other layers. */
static int x_to_host(kvt_engine *e, kvt_eng_gpu *g, int32_t n) {
    const uint64_t bytes = (uint64_t)n * (uint64_t)e->model->hp.n_embd * sizeof(float);
    kvt_gpu_region r = {0, 0, bytes};
    int rc = kvt_gpu_rec_copy(g->d, g->x, g->in_stage, &r, 1);
    if (!rc) rc = kvt_gpu_submit(g->d);
    else kvt_gpu_abort(g->d);
    if (!rc) memcpy(e->x, kvt_gpu_buf_host(g->in_stage), (size_t)bytes);
    if (!rc) g->st.chunks++, g->st.tokens += (uint64_t)n;
    return rc ? kvt_fail_prefix(rc, "GPU forward pass of %d tokens: ", n) : 0;
}

/* Whether the device starts on what is recorded after layer l while the host records the next layers: after
 * layers 1, 2 and 4, so the device starts early, then every LAYERS_PER_SUBMIT. */
static int flush_after(int32_t l) {
    const int32_t k = l + 1;
    return k % LAYERS_PER_SUBMIT == 0 || (k < LAYERS_PER_SUBMIT && (k & (k - 1)) == 0);
}

/* Long: the device's layers in command lists the device runs while the next are recorded, then with every layer
 * here the hidden rows and the first logits in the last list, or with partial offload the residual rows back to
 * the host. */
int kvt_eng_gpu_forward(kvt_engine *e, int32_t n, int32_t n_want, float *logits, const int8_t *want_hidden,
                        float **hidden) {
    kvt_eng_gpu *g = e->gpu;
    const kvt_hparams *hp = &e->model->hp;
    int32_t n_hid = 0;
    for (int32_t i = 0; want_hidden && i < n; i++) n_hid += want_hidden[i] != 0;
    stage_inputs(e, g, n);
    int rc = kvt_gpu_begin(g->d);
    if (!rc) rc = rec_inputs(e, g, n);
    for (int32_t l = 0; !rc && l < g->n_layer; l++) {
        rc = rec_layer(e, g, l, (uint32_t)n);
        if (!rc && flush_after(l) && l + 1 < g->n_layer) rc = kvt_gpu_flush(g->d);
    }
    if (g->n_layer < hp->n_layer) {
        if (rc) kvt_gpu_abort(g->d);
        return rc ? kvt_fail_prefix(rc, "GPU forward pass of %d tokens: ", n) : x_to_host(e, g, n);
    }
    /* the hidden rows and the first logits ride in the last layers' list: no extra wait */
    const int32_t m0 = KVT_MIN((int32_t)g->lg, n_want);
    if (!rc && n_hid) rc = rec_hidden(e, g, n, want_hidden);
    if (!rc && m0 > 0) rc = rec_logits(e, g, 0, m0);
    if (!rc) rc = kvt_gpu_submit(g->d);
    else kvt_gpu_abort(g->d);
    if (!rc && n_hid) {
        const size_t bytes = (size_t)n_hid * (size_t)hp->n_embd * sizeof(float);
        memcpy(*hidden, kvt_gpu_buf_host(g->in_stage), bytes);
        *hidden += (int64_t)n_hid * hp->n_embd;
    }
    if (!rc && m0 > 0) memcpy(logits, kvt_gpu_buf_host(g->out_stage), (size_t)m0 * (size_t)hp->n_vocab * 4);
    for (int32_t w0 = m0; !rc && w0 < n_want; w0 += (int32_t)g->lg) {
        int32_t m = KVT_MIN((int32_t)g->lg, n_want - w0);
        rc = logits_pass(e, g, w0, m, logits + (int64_t)w0 * hp->n_vocab);
    }
    if (!rc) g->st.chunks++, g->st.tokens += (uint64_t)n;
    return rc ? kvt_fail_prefix(rc, "GPU forward pass of %d tokens: ", n) : 0;
}
