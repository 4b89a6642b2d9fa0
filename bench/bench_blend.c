/* Approximate reuse (README "Approximate reuse") on the RAG benchmark set of
 * bench/rag.sh, in one process, against full recompute:
 *   for each question (one per line of QUESTIONS), the k best chunks of INDEX
 *   in score order (naive RAG: a different order for every question) are
 *   rendered as fixed context blocks, [BOS system][chunks][question], and run
 *     cold     without a cache: the reference (full recompute);
 *     exact    with the cache, exact reuse only;
 *     R        with the cache and approximate reuse at recompute ratio R (one
 *              cache per variant, each filled by its own earlier requests; with
 *              --prewarm every [BOS system][chunk] is computed first, as `kvtier
 *              rag prewarm` does, not counted).
 *   Per variant: prompt tokens computed (exact + recomputed + after the
 *   documents), reused approximately, computed to store documents, first
 *   token top-1 agreement with cold, greedy N-token agreement, the largest
 *   |logit - cold logit| of the first token (max over questions, and the mean
 *   of the per-question max), and the summed prefill time (loaded machines skew it).
 * Numbers only, never pass/fail.
 * usage: bench_blend -m MODEL --index INDEX --questions FILE [-t THREADS] [-k K] [-n N]
 *                    [--ratios R,R,...] [--prewarm] [--ctx N] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blend.h"
#include "cache.h"
#include "common.h"
#include "generate.h"
#include "model.h"
#include "rag.h"
#include "sampler.h"

#define MAX_VARIANTS 8
#define MAX_QUESTIONS 4096
#define LINE_MAX_BYTES 4096
#define SYSTEM "You answer questions about the documents below. Quote the document id.\n\n"

typedef struct {
    char name[32];
    float ratio; /* < 0: exact reuse; cold has no cache */
    int cold;
    kvt_engine *e;
    kvt_cache *c;
    int64_t computed, approx, stored, placed;
    int32_t top1, greedy, n;
    double max_dev, sum_dev, prefill_ms;
} variant;

typedef struct {
    int32_t *tokens, n;
    float *logits;
    kvt_gen_result res;
} run_out;

static run_out run(variant *v, const int32_t *p, int32_t n, const size_t *starts, size_t n_docs, int32_t n_gen,
                   int32_t n_vocab) {
    run_out o = {0};
    kvt_sampler_params sp = kvt_sampler_default_params();
    sp.temp = 0;
    kvt_sampler *s = kvt_sampler_new(sp, n_vocab);
    o.logits = kvt_xmalloc((size_t)n_vocab * sizeof *o.logits);
    kvt_blend_params bp = kvt_blend_default_params();
    bp.ratio = v->ratio;
    kvt_gen_params gp = {.max_tokens = n_gen, .sampler = s, .first_logits = o.logits,
                         .blend = v->ratio >= 0 ? &bp : NULL, .doc_starts = starts, .n_docs = n_docs};
    if (kvt_generate(v->e, v->c, p, n, &gp, &o.tokens, &o.res)) {
        fprintf(stderr, "bench_blend: %s: %s\n", v->name, kvt_errmsg());
        exit(1);
    }
    o.n = o.res.n_prompt + o.res.n_generated;
    kvt_sampler_free(s);
    return o;
}

static int32_t *tok(const kvt_model *m, const char *text, int bos, size_t *n) {
    int32_t *ids = NULL;
    if (kvt_model_tokenize(m, text, strlen(text), bos, 0, &ids, n)) {
        fprintf(stderr, "bench_blend: cannot tokenize: %s\n", kvt_errmsg());
        exit(1);
    }
    return ids;
}

/* [BOS system][docs][Question: q\nAnswer:] with the documents' spans. */
static int32_t *render(const kvt_model *m, int32_t B, const char *q, const kvt_document *docs, size_t n_docs,
                       size_t *n, size_t *starts) {
    char text[LINE_MAX_BYTES + 64];
    snprintf(text, sizeof text, "Question: %s\nAnswer:", q);
    size_t n_pre, n_post;
    int32_t *pre = tok(m, SYSTEM, 1, &n_pre), *post = tok(m, text, 0, &n_post);
    int32_t *both = kvt_xmalloc((n_pre + n_post) * sizeof *both), *out = NULL;
    memcpy(both, pre, n_pre * sizeof *both);
    memcpy(both + n_pre, post, n_post * sizeof *both);
    if (kvt_render_documents_spans(m, B, both, n_pre + n_post, n_pre, docs, n_docs, &out, n, starts)) {
        fprintf(stderr, "bench_blend: cannot render the documents: %s\n", kvt_errmsg());
        exit(1);
    }
    free(pre), free(post), free(both);
    return out;
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *index_path = NULL, *q_path = NULL, *ratios = "0,0.15,0.3,1";
    int threads = 2, k = 3, n_gen = 8, prewarm = 0;
    int32_t ctx = 4096;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-m") && v) model_path = argv[++i];
        else if (!strcmp(a, "--index") && v) index_path = argv[++i];
        else if (!strcmp(a, "--questions") && v) q_path = argv[++i];
        else if (!strcmp(a, "-t") && v) threads = atoi(argv[++i]);
        else if (!strcmp(a, "-k") && v) k = atoi(argv[++i]);
        else if (!strcmp(a, "-n") && v) n_gen = atoi(argv[++i]);
        else if (!strcmp(a, "--ctx") && v) ctx = atoi(argv[++i]);
        else if (!strcmp(a, "--ratios") && v) ratios = argv[++i];
        else if (!strcmp(a, "--prewarm")) prewarm = 1;
        else {
            fprintf(stderr, "usage: bench_blend -m MODEL --index INDEX --questions FILE [-t THREADS] [-k K] [-n N] "
                            "[--ratios R,R,...] [--prewarm] [--ctx N]\n");
            return 2;
        }
    }
    if (!model_path || !index_path || !q_path || k < 1 || k > KVT_RAG_MAX_K) {
        fprintf(stderr, "bench_blend: -m, --index and --questions are needed\n");
        return 2;
    }
    kvt_model *m = NULL;
    kvt_rag_index *idx = NULL;
    if (kvt_model_load(model_path, kvt_model_default_params(), &m) || kvt_rag_load(index_path, &idx)) {
        fprintf(stderr, "bench_blend: %s\n", kvt_errmsg());
        return 1;
    }
    const int32_t B = kvt_rag_block_size(idx), nv = m->hp.n_vocab;
    static char qs[MAX_QUESTIONS][LINE_MAX_BYTES];
    int nq = 0;
    FILE *f = fopen(q_path, "r");
    if (!f) {
        perror(q_path);
        return 1;
    }
    while (nq < MAX_QUESTIONS && fgets(qs[nq], LINE_MAX_BYTES, f)) {
        qs[nq][strcspn(qs[nq], "\n")] = 0;
        if (qs[nq][0]) nq++;
    }
    fclose(f);

    variant vs[MAX_VARIANTS] = {0};
    int nvar = 0;
    vs[nvar++] = (variant){.name = "cold", .ratio = -1, .cold = 1};
    vs[nvar++] = (variant){.name = "exact", .ratio = -1};
    for (const char *r = ratios; *r && nvar < MAX_VARIANTS;) {
        char *end;
        double x = strtod(r, &end);
        if (end == r || x < 0 || x > 1) {
            fprintf(stderr, "bench_blend: --ratios takes numbers in [0, 1], got '%s'\n", r);
            return 2;
        }
        vs[nvar] = (variant){.ratio = (float)x};
        snprintf(vs[nvar].name, sizeof vs[nvar].name, "approx %.2f", x);
        nvar++;
        r = *end == ',' ? end + 1 : end;
    }
    kvt_engine_params ep = kvt_engine_default_params();
    ep.block_size = B;
    ep.n_threads = threads;
    ep.n_ctx = ctx;
    ep.kv_active_bytes = 512ull << 20;
    for (int i = 0; i < nvar; i++) {
        if (kvt_engine_new(m, ep, &vs[i].e) || (!vs[i].cold && kvt_cache_new(vs[i].e, kvt_cache_default_params(), &vs[i].c))) {
            fprintf(stderr, "bench_blend: %s\n", kvt_errmsg());
            return 1;
        }
    }
    if (prewarm) /* [BOS system][chunk] for every chunk, as `kvtier rag prewarm` */
        for (int32_t ch = 0; ch < kvt_rag_n_chunks(idx); ch++) {
            const kvt_rag_chunk *c = kvt_rag_chunk_at(idx, ch);
            kvt_document d = {c->id, c->text};
            size_t n, starts[2];
            int32_t *p = render(m, B, "", &d, 1, &n, starts);
            for (int i = 0; i < nvar; i++) {
                if (vs[i].cold) continue;
                variant exact = vs[i];
                exact.ratio = -1;
                run_out o = run(&exact, p, (int32_t)n, starts, 1, 0, nv);
                free(o.tokens), free(o.logits);
            }
            free(p);
        }
    printf("bench_blend: %s, %d questions, k %d, block %d%s\n", model_path, nq, k, B, prewarm ? ", prewarmed" : "");
    for (int qi = 0; qi < nq; qi++) {
        kvt_rag_hit hits[KVT_RAG_MAX_K];
        kvt_document docs[KVT_RAG_MAX_K];
        int32_t nh = kvt_rag_query(idx, qs[qi], k, hits);
        kvt_rag_plan(idx, KVT_RAG_ORDER_SCORE, hits, nh, docs);
        size_t n, starts[KVT_RAG_MAX_K + 1];
        int32_t *p = render(m, B, qs[qi], docs, (size_t)nh, &n, starts);
        run_out ref = {0};
        for (int i = 0; i < nvar; i++) {
            variant *v = &vs[i];
            run_out o = run(v, p, (int32_t)n, starts, (size_t)nh, n_gen, nv);
            v->n++;
            v->computed += o.res.n_computed;
            v->approx += o.res.blend.n_placed - o.res.blend.n_recomputed;
            v->placed += o.res.blend.n_placed;
            v->stored += o.res.blend.n_stored;
            v->prefill_ms += o.res.prefill_ms;
            if (v->cold) {
                ref = o;
                continue;
            }
            int32_t a = 0, b = 0;
            double dev = 0;
            for (int32_t t = 0; t < nv; t++) {
                if (o.logits[t] > o.logits[a]) a = t;
                if (ref.logits[t] > ref.logits[b]) b = t;
                dev = fmax(dev, fabs((double)o.logits[t] - (double)ref.logits[t]));
            }
            v->top1 += a == b;
            v->greedy += o.n == ref.n && !memcmp(o.tokens, ref.tokens, (size_t)o.n * sizeof *o.tokens);
            v->max_dev = fmax(v->max_dev, dev);
            v->sum_dev += dev;
            free(o.tokens), free(o.logits);
        }
        free(ref.tokens), free(ref.logits);
        free(p);
        if ((qi + 1) % 10 == 0) fprintf(stderr, "bench_blend: %d/%d questions\n", qi + 1, nq);
    }
    printf("%-12s %9s %9s %8s %8s %8s %8s %9s %9s %10s\n", "variant", "computed", "approx", "stored", "top-1",
           "greedy", "", "max dev", "mean dev", "prefill s");
    for (int i = 0; i < nvar; i++) {
        variant *v = &vs[i];
        printf("%-12s %9lld %9lld %8lld %4d/%-3d %4d/%-3d %8s %9.4f %9.4f %10.1f\n", v->name, (long long)v->computed,
               (long long)v->approx, (long long)v->stored, v->cold ? v->n : v->top1, v->n, v->cold ? v->n : v->greedy,
               v->n, "", v->max_dev, v->sum_dev / (v->n ? v->n : 1), v->prefill_ms / 1e3);
    }
    printf("computed tokens, exact / approx at each ratio:");
    for (int i = 2; i < nvar; i++)
        printf(" %.2f: %.2fx", (double)vs[i].ratio, (double)vs[1].computed / (double)KVT_MAX(vs[i].computed, 1));
    printf("\n");
    for (int i = 0; i < nvar; i++) {
        kvt_cache_free(vs[i].c);
        kvt_engine_free(vs[i].e);
    }
    kvt_rag_free(idx);
    kvt_model_free(m);
    return 0;
}
