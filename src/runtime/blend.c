/* kvt_blend: approximate reuse of documents at a new position (blend.h). */
#include "blend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "model.h"

kvt_blend_params kvt_blend_default_params(void) {
    kvt_blend_params p = {.ratio = KVT_BLEND_DEFAULT_RATIO, .layer = KVT_BLEND_DEFAULT_LAYER};
    return p;
}

/* Feeds prompt[from..to) to seq exactly (pages reserved first). */
static int feed(kvt_cache *c, int32_t seq, const int32_t *prompt, int32_t from, int32_t to) {
    kvt_engine *e = kvt_cache_engine(c);
    if (to <= from) return 0;
    int rc = kvt_cache_reserve(c, kvt_seq_pages_needed(e, seq, to - from));
    return rc ? rc : kvt_engine_feed(e, seq, prompt + from, to - from, 0, NULL);
}

/* Appends document prompt[at..end) to seq from the stored KV of [P][d]
 * (P = prompt[0..home)): restored from any tier, or computed and cached now;
 * each page copied and its K rotated by at - home. */
static int place(kvt_cache *c, kvt_hash128 root, int32_t seq, const int32_t *prompt, int32_t home, int32_t at,
                 int32_t end, kvt_blend_result *res) {
    kvt_engine *e = kvt_cache_engine(c);
    const int32_t B = kvt_engine_params_of(e).block_size, dl = end - at, n = home + dl, np = dl / B;
    int32_t *src = kvt_xmalloc((size_t)n * sizeof *src), *fresh = kvt_xmalloc((size_t)np * sizeof *fresh);
    memcpy(src, prompt, (size_t)home * sizeof *src);
    memcpy(src + home, prompt + at, (size_t)dl * sizeof *src);
    int32_t sseq = -1, got = 0;
    kvt_attach_info ai;
    int rc = kvt_cache_attach_quiet(c, root, src, n, n, &sseq, &ai);
    if (!rc && kvt_seq_len(e, sseq) < n) {
        /* not stored (or only partly): compute [P][d] exactly and cache it, as a prefill would */
        int32_t have = kvt_seq_len(e, sseq);
        kvt_chain ch;
        kvt_chain_init(&ch, root);
        rc = feed(c, sseq, src, have, n);
        if (!rc) {
            kvt_cache_commit(c, sseq, src, &ch);
            res->n_stored += n - have;
        }
    }
    if (!rc) rc = kvt_cache_reserve(c, np);
    const int32_t *sp = rc ? NULL : kvt_seq_pages(e, sseq, NULL);
    for (; !rc && got < np; got++) {
        if ((rc = kvt_page_alloc(e, &fresh[got]))) break;
        memcpy(kvt_page_data(e, fresh[got]), kvt_page_data_const(e, sp[home / B + got]), kvt_page_bytes(e));
        if ((rc = kvt_engine_rerope_page(e, fresh[got], at - home))) {
            got++;
            break;
        }
    }
    if (!rc) rc = kvt_seq_append_pages(e, seq, fresh, np);
    for (int32_t i = 0; i < got; i++) kvt_page_unref(e, fresh[i]); /* the sequence holds them now */
    if (sseq >= 0) kvt_seq_free(e, sseq);
    free(src);
    free(fresh);
    return rc;
}

typedef struct {
    float dev;
    int32_t pos;
} ranked;

/* Largest deviation first; the earlier position on a tie, so the choice is reproducible. */
static int by_deviation(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->dev != y->dev) return x->dev < y->dev ? 1 : -1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

static int by_pos(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

/* Steps 3 and 4 of blend.h over the placed tokens prompt[a..z). */
static int select_and_recompute(kvt_engine *e, int32_t seq, const int32_t *prompt, int32_t a, int32_t z,
                                const kvt_blend_params *bp, kvt_blend_result *res) {
    const int32_t n = z - a, n_layer = kvt_engine_model(e)->hp.n_layer;
    const int32_t layer = KVT_MAX(0, KVT_MIN(bp->layer, n_layer - 1));
    int32_t *pos = kvt_xmalloc((size_t)n * sizeof *pos), *tok = kvt_xmalloc((size_t)n * sizeof *tok);
    float *dev = kvt_xmalloc((size_t)n * sizeof *dev);
    ranked *r = kvt_xmalloc((size_t)n * sizeof *r);
    for (int32_t i = 0; i < n; i++) pos[i] = a + i;
    int rc = kvt_engine_recompute(e, seq, prompt + a, pos, n, layer, dev);
    int32_t k = (int32_t)floor((double)bp->ratio * n + 0.5);
    k = KVT_MAX(0, KVT_MIN(k, n));
    if (!rc && k > 0) {
        for (int32_t i = 0; i < n; i++) r[i] = (ranked){dev[i], a + i};
        qsort(r, (size_t)n, sizeof *r, by_deviation);
        qsort(r, (size_t)k, sizeof *r, by_pos);
        for (int32_t i = 0; i < k; i++) {
            pos[i] = r[i].pos;
            tok[i] = prompt[r[i].pos];
        }
        rc = kvt_engine_recompute(e, seq, tok, pos, k, 0, NULL);
    }
    if (!rc) res->n_recomputed = k;
    free(pos), free(tok), free(dev), free(r);
    return rc;
}

int kvt_blend(kvt_cache *c, kvt_hash128 root, int32_t seq, const int32_t *prompt, int32_t n_prompt,
              const size_t *doc_starts, size_t n_docs, kvt_chain *chain, const kvt_blend_params *bp,
              kvt_blend_result *res) {
    memset(res, 0, sizeof *res);
    kvt_engine *e = kvt_cache_engine(c);
    const int32_t B = kvt_engine_params_of(e).block_size, len = kvt_seq_len(e, seq);
    if (n_docs < 2 || len < 0 || !(bp->ratio >= 0.0f && bp->ratio <= 1.0f)) return 0;
    double t0 = kvt_now();
    /* the first document from the second on that the exact prefix leaves out
     * whole; a document it covers in part is finished exactly first */
    size_t first = 1;
    while (first < n_docs && doc_starts[first] < (size_t)len) first++;
    size_t last = first; /* documents [first, last) are placed: they end before the prompt's last token */
    while (last < n_docs && doc_starts[last + 1] <= (size_t)n_prompt - 1) last++;
    if (last == first) return 0;
    const int32_t home = (int32_t)doc_starts[0], a = (int32_t)doc_starts[first], z = (int32_t)doc_starts[last];
    for (size_t i = 0; i <= n_docs; i++)
        if (doc_starts[i] % (size_t)B) return kvt_fail(KVT_EARG, "documents must start on block boundaries");
    int rc = feed(c, seq, prompt, len, a);
    if (rc) return rc;
    res->n_exact = a - len;
    kvt_cache_commit(c, seq, prompt, chain);
    chain->n_done = INT32_MAX; /* from here on the sequence is not what a cold run computes */
    for (size_t i = first; i < last && !rc; i++) {
        rc = place(c, root, seq, prompt, home, (int32_t)doc_starts[i], (int32_t)doc_starts[i + 1], res);
        if (!rc) {
            res->n_docs++;
            res->n_placed += (int32_t)(doc_starts[i + 1] - doc_starts[i]);
        }
    }
    if (!rc) rc = select_and_recompute(e, seq, prompt, a, z, bp, res);
    res->ms = (kvt_now() - t0) * 1e3;
    return rc;
}
