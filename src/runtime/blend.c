// SPDX-License-Identifier: MIT
/* kvt_blend: approximate reuse of documents at a new position (blend.h), as a
 * job that advances in bounded steps (kvt_blend_step) so a server can run
 * other sequences' decode steps between them. */
#include "blend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "model.h"

/* A placed page costs this many tokens of a step's budget: rotating a page's K
 * is far cheaper than one token's forward pass, so counting it as one token
 * bounds a step's copying without spreading a document over many steps. */
#define PAGE_COST 1

typedef enum { PH_EXACT, PH_OPEN, PH_STORE, PH_COPY, PH_SELECT, PH_SELECT2, PH_RECOMPUTE, PH_DONE } phase;

struct kvt_blend_job {
    kvt_cache *c;
    kvt_engine *e;
    kvt_hash128 root;
    int32_t seq, B;
    const int32_t *prompt;    /* borrowed */
    const size_t *doc_starts; /* borrowed */
    kvt_blend_params bp;
    int32_t home, a, z; /* P = prompt[0..home); placed tokens prompt[a..z) */
    size_t doc, last;   /* the document being placed; placed ones are [first, last) */
    phase ph;
    int32_t cur;         /* progress within the phase (tokens, pages or selected tokens) */
    int32_t sseq;        /* PH_STORE/PH_COPY: the side sequence holding [P][d], or -1 */
    int32_t *src, n_src; /* ... its tokens */
    kvt_chain side;      /* ... its key chain */
    int32_t *pos, *tok;  /* selection: the placed positions and tokens, then the n_cand candidates ... */
    int32_t n_cand, k;   /* ... (two stages), then the k selected ones, in position order */
    float *dev;          /* the deviation of each placed token (z - a), then of each candidate */
    kvt_blend_result res;
};

kvt_blend_params kvt_blend_default_params(void) {
    kvt_blend_params p = {.ratio = KVT_BLEND_DEFAULT_RATIO, .layer = KVT_BLEND_DEFAULT_LAYER};
    return p;
}

/* Feeds tokens[from..to) to seq exactly (pages reserved first). */
static int feed(kvt_cache *c, int32_t seq, const int32_t *tokens, int32_t from, int32_t to) {
    kvt_engine *e = kvt_cache_engine(c);
    if (to <= from) return 0;
    int rc = kvt_cache_reserve(c, kvt_seq_pages_needed(e, seq, to - from));
    return rc ? rc : kvt_engine_feed(e, seq, tokens + from, to - from, 0, NULL);
}

int kvt_blend_begin(kvt_cache *c, kvt_hash128 root, int32_t seq, const int32_t *prompt, int32_t n_prompt,
                    const size_t *doc_starts, size_t n_docs, const kvt_blend_params *bp, kvt_blend_job **out) {
    *out = NULL;
    kvt_engine *e = kvt_cache_engine(c);
    const int32_t B = kvt_engine_params_of(e).block_size, len = kvt_seq_len(e, seq);
    if (n_docs < 2 || len < 0 || !(bp->ratio >= 0.0f && bp->ratio <= 1.0f)) return 0;
    /* the first document from the second on that the exact prefix leaves out
     * whole; a document it covers in part is finished exactly first */
    size_t first = 1;
    while (first < n_docs && doc_starts[first] < (size_t)len) first++;
    size_t last = first; /* documents [first, last) are placed: they end before the prompt's last token */
    while (last < n_docs && doc_starts[last + 1] <= (size_t)n_prompt - 1) last++;
    if (last == first) return 0;
    for (size_t i = 0; i <= n_docs; i++)
        if (doc_starts[i] % (size_t)B) return kvt_fail(KVT_EARG, "documents must start on block boundaries");
    kvt_blend_job *j = kvt_xcalloc(1, sizeof *j);
    *j = (kvt_blend_job){.c = c,
                         .e = e,
                         .root = root,
                         .seq = seq,
                         .B = B,
                         .prompt = prompt,
                         .doc_starts = doc_starts,
                         .bp = *bp,
                         .home = (int32_t)doc_starts[0],
                         .a = (int32_t)doc_starts[first],
                         .z = (int32_t)doc_starts[last],
                         .doc = first,
                         .last = last,
                         .ph = PH_EXACT,
                         .cur = len,
                         .sseq = -1};
    *out = j;
    return 0;
}

/* PH_EXACT: prompt[len..a) fed exactly and registered; then the chain is
 * closed: from the first placed document on, the sequence is not what a cold
 * run computes. */
static int step_exact(kvt_blend_job *j, kvt_chain *chain, int32_t *budget) {
    const int32_t n = KVT_MIN(*budget, j->a - j->cur);
    int rc = feed(j->c, j->seq, j->prompt, j->cur, j->cur + n);
    if (rc) return rc;
    j->cur += n, *budget -= n, j->res.n_exact += n;
    kvt_cache_commit(j->c, j->seq, j->prompt, chain);
    if (j->cur == j->a) {
        chain->n_done = INT32_MAX;
        j->ph = PH_OPEN;
    }
    return 0;
}

/* PH_OPEN: document j->doc's stored KV, [P][d], attached to a side sequence
 * from any tier (what is missing is computed in PH_STORE). */
static int step_open(kvt_blend_job *j) {
    const int32_t at = (int32_t)j->doc_starts[j->doc], dl = (int32_t)j->doc_starts[j->doc + 1] - at;
    j->n_src = j->home + dl;
    j->src = kvt_xmalloc((size_t)j->n_src * sizeof *j->src);
    memcpy(j->src, j->prompt, (size_t)j->home * sizeof *j->src);
    memcpy(j->src + j->home, j->prompt + at, (size_t)dl * sizeof *j->src);
    kvt_attach_info ai;
    int rc = kvt_cache_attach_quiet(j->c, j->root, j->src, j->n_src, j->n_src, &j->sseq, &ai);
    if (rc) return rc;
    kvt_chain_init(&j->side, j->root);
    j->cur = kvt_seq_len(j->e, j->sseq);
    j->ph = PH_STORE;
    return 0;
}

/* PH_STORE: [P][d] not stored (or only partly): computed exactly and cached,
 * as a prefill would. */
static int step_store(kvt_blend_job *j, int32_t *budget) {
    const int32_t n = KVT_MIN(*budget, j->n_src - j->cur);
    int rc = feed(j->c, j->sseq, j->src, j->cur, j->cur + n);
    if (rc) return rc;
    j->cur += n, *budget -= n, j->res.n_stored += n;
    if (j->cur == j->n_src) {
        kvt_cache_commit(j->c, j->sseq, j->src, &j->side);
        j->cur = 0;
        j->ph = PH_COPY;
    }
    return 0;
}

/* Ends the side sequence of the document being placed. */
static void side_free(kvt_blend_job *j) {
    if (j->sseq >= 0) kvt_seq_free(j->e, j->sseq);
    j->sseq = -1;
    free(j->src);
    j->src = NULL;
}

/* PH_COPY: each page of d's stored KV copied to a fresh page with its K
 * rotated from its stored position (home) to its place, and appended to seq. */
static int step_copy(kvt_blend_job *j, int32_t *budget) {
    const int32_t at = (int32_t)j->doc_starts[j->doc], np = ((int32_t)j->doc_starts[j->doc + 1] - at) / j->B;
    const int32_t *sp = kvt_seq_pages(j->e, j->sseq, NULL);
    int rc = 0;
    for (; j->cur<np && * budget> 0; j->cur++, *budget -= PAGE_COST) {
        int32_t pg = -1;
        if ((rc = kvt_cache_reserve(j->c, 1)) || (rc = kvt_page_alloc(j->e, &pg))) return rc;
        int32_t from = sp[j->home / j->B + j->cur];
        rc = kvt_pages_copy(j->e, &pg, &from, 1);
        if (!rc) rc = kvt_engine_rerope_page(j->e, pg, at - j->home);
        if (!rc) rc = kvt_seq_append_pages(j->e, j->seq, &pg, 1);
        kvt_page_unref(j->e, pg); /* the sequence holds it now (or nobody, on failure) */
        if (rc) return rc;
    }
    if (j->cur == np) {
        side_free(j);
        j->res.n_docs++;
        j->res.n_placed += np * j->B;
        j->doc++;
        j->ph = j->doc < j->last ? PH_OPEN : PH_SELECT;
        j->cur = 0;
    }
    return 0;
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

/* Keeps the k of j->pos[0..n) whose j->dev deviates most, in position order,
 * in j->pos[0..k) with their tokens in j->tok. */
static void keep_top(kvt_blend_job *j, int32_t n, int32_t k) {
    ranked *r = kvt_xmalloc((size_t)KVT_MAX(n, 1) * sizeof *r);
    for (int32_t i = 0; i < n; i++) r[i] = (ranked){j->dev[i], j->pos[i]};
    qsort(r, (size_t)n, sizeof *r, by_deviation);
    qsort(r, (size_t)k, sizeof *r, by_pos);
    for (int32_t i = 0; i < k; i++) {
        j->pos[i] = r[i].pos;
        j->tok[i] = j->prompt[r[i].pos];
    }
    free(r);
}

/* The layer of selection stage 1 (or 2), clamped to the model. */
static int32_t stage_layer(const kvt_blend_job *j, int stage) {
    const int32_t n_layer = kvt_engine_model(j->e)->hp.n_layer;
    return KVT_MAX(0, KVT_MIN(stage == 2 ? j->bp.layer2 : j->bp.layer, n_layer - 1));
}

/* PH_SELECT (blend.h step 3): every placed token through layers [0, layer)
 * and its deviation at layer; then the k to recompute, or with two stages the
 * candidates for PH_SELECT2. */
static int step_select(kvt_blend_job *j, int32_t *budget) {
    const int32_t n_all = j->z - j->a;
    if (!j->pos) {
        const size_t cap = (size_t)KVT_MAX(n_all, 1);
        j->pos = kvt_xmalloc(cap * sizeof *j->pos);
        j->tok = kvt_xmalloc(cap * sizeof *j->tok);
        j->dev = kvt_xmalloc(cap * sizeof *j->dev);
        for (int32_t i = 0; i < n_all; i++) j->pos[i] = j->a + i;
        j->k = KVT_MAX(0, KVT_MIN((int32_t)floor((double)j->bp.ratio * n_all + 0.5), n_all));
    }
    const int32_t n = KVT_MIN(*budget, n_all - j->cur);
    int rc = kvt_engine_recompute(j->e, j->seq, j->prompt + j->a + j->cur, j->pos + j->cur, n, stage_layer(j, 1),
                                  j->dev + j->cur);
    if (rc) return rc;
    j->cur += n, *budget -= n;
    if (j->cur < n_all) return 0;
    j->cur = 0;
    if (stage_layer(j, 2) > stage_layer(j, 1) && j->k > 0) {
        j->n_cand = (int32_t)KVT_MIN((int64_t)j->k * KVT_BLEND_STAGE1_WIDEN, (int64_t)n_all);
        keep_top(j, n_all, j->n_cand);
        j->ph = PH_SELECT2;
    } else {
        keep_top(j, n_all, j->k);
        j->ph = PH_RECOMPUTE;
    }
    return 0;
}

/* PH_SELECT2: the candidates on through layers [0, layer2) (those below
 * layer are recomputed to the same values) and ranked by their deviation at layer2. */
static int step_select2(kvt_blend_job *j, int32_t *budget) {
    const int32_t n = KVT_MIN(*budget, j->n_cand - j->cur);
    int rc = kvt_engine_recompute(j->e, j->seq, j->tok + j->cur, j->pos + j->cur, n, stage_layer(j, 2), j->dev + j->cur);
    if (rc) return rc;
    j->cur += n, *budget -= n;
    if (j->cur == j->n_cand) {
        keep_top(j, j->n_cand, j->k);
        j->cur = 0;
        j->ph = PH_RECOMPUTE;
    }
    return 0;
}

static int step_recompute(kvt_blend_job *j, int32_t *budget) {
    const int32_t n = KVT_MIN(*budget, j->k - j->cur);
    int rc = kvt_engine_recompute(j->e, j->seq, j->tok + j->cur, j->pos + j->cur, n, 0, NULL);
    if (rc) return rc;
    j->cur += n, *budget -= n, j->res.n_recomputed += n;
    if (j->cur == j->k) j->ph = PH_DONE;
    return 0;
}

int kvt_blend_step(kvt_blend_job *j, kvt_chain *chain, int32_t budget) {
    if (budget < 1) return kvt_fail(KVT_EARG, "a blend step needs a budget of at least one token");
    double t0 = kvt_now();
    int rc = 0;
    while (!rc && budget > 0 && j->ph != PH_DONE) {
        switch (j->ph) {
        case PH_EXACT: rc = step_exact(j, chain, &budget); break;
        case PH_OPEN: rc = step_open(j); break;
        case PH_STORE: rc = step_store(j, &budget); break;
        case PH_COPY: rc = step_copy(j, &budget); break;
        case PH_SELECT: rc = step_select(j, &budget); break;
        case PH_SELECT2: rc = step_select2(j, &budget); break;
        case PH_RECOMPUTE: rc = step_recompute(j, &budget); break;
        case PH_DONE: break;
        }
    }
    j->res.ms += (kvt_now() - t0) * 1e3;
    j->res.steps++;
    return rc ? rc : j->ph != PH_DONE;
}

const kvt_blend_result *kvt_blend_job_result(const kvt_blend_job *j) { return &j->res; }

void kvt_blend_job_free(kvt_blend_job *j) {
    if (!j) return;
    side_free(j);
    free(j->pos), free(j->tok), free(j->dev);
    free(j);
}

int kvt_blend(kvt_cache *c, kvt_hash128 root, int32_t seq, const int32_t *prompt, int32_t n_prompt,
              const size_t *doc_starts, size_t n_docs, kvt_chain *chain, const kvt_blend_params *bp,
              kvt_blend_result *res) {
    memset(res, 0, sizeof *res);
    kvt_blend_job *j = NULL;
    int rc = kvt_blend_begin(c, root, seq, prompt, n_prompt, doc_starts, n_docs, bp, &j);
    while (!rc && j && (rc = kvt_blend_step(j, chain, INT32_MAX)) > 0) {
    }
    if (j) *res = j->res;
    kvt_blend_job_free(j);
    return rc < 0 ? rc : 0;
}
