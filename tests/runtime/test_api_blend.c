// SPDX-License-Identifier: MIT
/* Approximate reuse through the public API alone (kvtier.h: kvt_request's
 * reuse, recompute_ratio and doc_starts, kvt_render_documents_spans):
 * - the defaults are exact reuse and a ratio of 0.15;
 * - a bad reuse mode, a ratio outside [0, 1] or NaN, missing or disordered
 *   document spans fail with KVT_EARG and a message naming the field, before
 *   anything runs: the cache's statistics and free pages are unchanged;
 * - approximate with ratio 1 gives a cold run's tokens; with the default
 *   ratio, the stats count the approximate tokens and add up to the prompt;
 * - an exact request after approximate ones still gives a cold run's tokens. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvtier.h"
#include "testutil.h"

#define BLOCK 16
#define N_GEN 8

static const kvt_document D[3] = {
    {"lyon", "The warehouse in Lyon ships orders on Mondays and Thursdays only, before noon."},
    {"refunds", "Refunds go back to the original card within five business days of the return."},
    {"bees", "Our bees are kept on the roof of the Lyon office and make about forty jars a year."},
};

typedef struct {
    int32_t *p;
    size_t n, starts[4];
} prompt;

static prompt render(kvt_model *m, const char *question, const kvt_document *docs) {
    prompt o = {0};
    int32_t *q = NULL;
    size_t nq = 0;
    CHECKF(kvt_model_tokenize(m, question, strlen(question), 1, 0, &q, &nq) == 0, "%s", kvt_errmsg());
    size_t at = nq && q[0] == kvt_model_get_info(m).bos ? 1 : 0;
    CHECKF(kvt_render_documents_spans(m, BLOCK, q, nq, at, docs, 3, &o.p, &o.n, o.starts) == 0, "%s", kvt_errmsg());
    free(q);
    return o;
}

static kvt_engine *engine(kvt_model *m) {
    kvt_engine_params ep = kvt_engine_default_params();
    ep.block_size = BLOCK;
    ep.n_threads = 2;
    ep.n_ctx = 512;
    ep.n_pages = 256;
    kvt_engine *e = NULL;
    CHECKF(kvt_engine_new(m, ep, &e) == 0, "%s", kvt_errmsg());
    return e;
}

/* A greedy run; *out gets prompt + generated (caller frees). */
static int run(kvt_cache *c, const prompt *p, kvt_request req, int32_t **out, kvt_request_stats *st) {
    req.max_tokens = N_GEN;
    req.temp = 0;
    return kvt_complete(c, p->p, (int32_t)p->n, &req, out, st);
}

static int same(const int32_t *a, const int32_t *b, const kvt_request_stats *sa, const kvt_request_stats *sb) {
    return a && b && sa->n_generated == sb->n_generated &&
        !memcmp(a, b, (size_t)(sa->n_prompt + sa->n_generated) * sizeof *a);
}

/* req fails with KVT_EARG naming field, and the cache is as it was. */
static void refused(kvt_cache *c, const prompt *p, kvt_request req, const char *field) {
    kvt_cache_stats before, after;
    kvt_cache_get_stats(c, &before);
    int32_t *out = NULL;
    kvt_request_stats st;
    int rc = run(c, p, req, &out, &st);
    CHECKF(rc == KVT_EARG, "%s: got %d (%s)", field, rc, kvt_strerror(rc));
    CHECKF(strstr(kvt_errmsg(), field) != NULL, "the message '%s' does not name %s", kvt_errmsg(), field);
    CHECK(out == NULL);
    kvt_cache_get_stats(c, &after);
    CHECKF(after.lookups == before.lookups && after.t0_pages_free == before.t0_pages_free,
           "%s: a refused request changed the cache", field);
}

int main(void) {
    kvt_model *made = kvt_test_tiny_model("api_blend.gguf", 2048);
    CHECK(made != NULL);
    kvt_model_free(made); /* loaded again below through the public API */
    char path[4096];
    snprintf(path, sizeof path, "%s/api_blend.gguf", kvt_test_tmpdir());
    kvt_model *m = NULL;
    CHECKF(kvt_model_load(path, kvt_model_default_params(), &m) == 0, "%s", kvt_errmsg());
    kvt_engine *e = m ? engine(m) : NULL, *ec = m ? engine(m) : NULL;
    kvt_cache *c = NULL, *cc = NULL;
    CHECK(e && ec && !kvt_cache_new(e, kvt_cache_default_params(), &c) &&
          !kvt_cache_new(ec, kvt_cache_default_params(), &cc));
    if (!c || !cc) return kvt_test_done("test_api_blend");

    kvt_request def = kvt_request_default_params();
    CHECK(def.reuse == KVT_REUSE_MODE_EXACT && def.recompute_ratio == KVT_DEFAULT_RECOMPUTE_RATIO);
    CHECK(def.doc_starts == NULL && def.n_docs == 0);
    kvt_document abc[3] = {D[0], D[1], D[2]}, cba[3] = {D[2], D[1], D[0]};
    prompt p1 = render(m, "When does Lyon ship?", abc), p3 = render(m, "How many jars?", cba);
    int32_t *cold = NULL, *o1 = NULL, *o3 = NULL, *o4 = NULL, *o5 = NULL;
    kvt_request_stats scold, s1, s3, s4, s5;
    CHECK(run(cc, &p3, def, &cold, &scold) == 0);
    CHECK(run(c, &p1, def, &o1, &s1) == 0); /* stores [P][lyon] and this order */

    kvt_request ap = def;
    ap.reuse = KVT_REUSE_MODE_APPROXIMATE;
    ap.doc_starts = p3.starts;
    ap.n_docs = 3;
    kvt_request bad = ap;
    bad.reuse = (kvt_reuse_mode)7;
    refused(c, &p3, bad, "kvt_request.reuse");
    bad = ap, bad.recompute_ratio = 1.5f;
    refused(c, &p3, bad, "kvt_request.recompute_ratio");
    bad = ap, bad.recompute_ratio = -0.1f;
    refused(c, &p3, bad, "kvt_request.recompute_ratio");
    bad = ap, bad.recompute_ratio = NAN;
    refused(c, &p3, bad, "kvt_request.recompute_ratio");
    bad = ap, bad.doc_starts = NULL;
    refused(c, &p3, bad, "kvt_request.doc_starts");
    size_t backwards[4] = {p3.starts[0], p3.starts[2], p3.starts[1], p3.starts[3]};
    bad = ap, bad.doc_starts = backwards;
    refused(c, &p3, bad, "kvt_request.doc_starts");
    size_t past[4] = {p3.starts[0], p3.starts[1], p3.starts[2], p3.n + 1};
    bad = ap, bad.doc_starts = past;
    refused(c, &p3, bad, "kvt_request.doc_starts");
    CHECK(strcmp(kvt_strerror(KVT_EARG), "invalid argument") == 0);

    /* ratio 1: refunds and lyon placed, every token recomputed in order: the cold tokens */
    ap.recompute_ratio = 1.0f;
    CHECKF(run(c, &p3, ap, &o3, &s3) == 0, "%s", kvt_errmsg());
    CHECKF(same(o3, cold, &s3, &scold), "approximate with ratio 1 differs from a cold run");
    CHECK(s3.n_docs_placed == 2 && s3.n_approximate == 0 && s3.n_recomputed == (int32_t)(p3.starts[3] - p3.starts[1]));
    CHECK(s3.n_stored > 0); /* [P][refunds] was never stored */
    /* the default ratio: tokens kept approximately, counted */
    ap.recompute_ratio = KVT_DEFAULT_RECOMPUTE_RATIO;
    CHECKF(run(c, &p3, ap, &o4, &s4) == 0, "%s", kvt_errmsg());
    int32_t placed = (int32_t)(p3.starts[3] - p3.starts[1]);
    CHECKF(s4.n_recomputed == (int32_t)floor(KVT_DEFAULT_RECOMPUTE_RATIO * placed + 0.5), "recomputed %d of %d",
           s4.n_recomputed, placed);
    CHECK(s4.n_approximate == placed - s4.n_recomputed && s4.n_approximate > 0 && s4.n_stored == 0);
    CHECKF(s4.n_computed + s4.n_cached + s4.n_approximate == s4.n_prompt, "%d + %d + %d != %d", s4.n_computed,
           s4.n_cached, s4.n_approximate, s4.n_prompt);
    /* exact again: nothing approximate was registered */
    CHECK(run(c, &p3, def, &o5, &s5) == 0);
    CHECKF(same(o5, cold, &s5, &scold), "an exact request after approximate ones differs from a cold run");
    CHECK(s5.n_docs_placed == 0 && s5.n_approximate == 0);

    free(cold), free(o1), free(o3), free(o4), free(o5), free(p1.p), free(p3.p);
    kvt_cache_free(c);
    kvt_cache_free(cc);
    kvt_engine_free(e);
    kvt_engine_free(ec);
    kvt_model_free(m);
    return kvt_test_done("test_api_blend");
}
