// SPDX-License-Identifier: MIT
/* Approximate reuse (docs/rag.md "Approximate reuse") on the RAG benchmark set of
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
 * A variant R@L selects at layer L (default 1); R@L+M in two stages, at L
 * then among the candidates at M (kvt_blend_params.layer2).
 * --stories: instead of an index, the quality set of tests/runtime/test_blend.c
 * for a small trained model such as ../shared/models/aidreams260K.gguf (its
 * vocabulary has no single newline token to render documents with): every
 * order of 3 of 5 one-sentence stories before "Once upon a time, there was a"
 * (60 prompts), each piece padded to a block with the newline byte token.
 * work: token-equivalents of forward work (layers run / layer count), since a
 * later selection layer runs every placed token through more layers.
 * Numbers only, never pass/fail.
 * usage: bench_blend -m MODEL (--index INDEX --questions FILE | --stories) [-t THREADS] [-k K] [-n N]
 *                    [--ratios R[@L[+M]],...] [--prewarm] [--ctx N] [--block B] */
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

#define MAX_VARIANTS 16
#define MAX_QUESTIONS 4096
#define LINE_MAX_BYTES 4096
#define SYSTEM "You answer questions about the documents below. Quote the document id.\n\n"

typedef struct {
    char name[64];
    float ratio;           /* < 0: exact reuse; cold has no cache */
    int32_t layer, layer2; /* kvt_blend_params' */
    int cold;
    kvt_engine *e;
    kvt_cache *c;
    int64_t computed, approx, stored, placed;
    double work; /* token-equivalents of forward work: layers run, over the model's layer count */
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
    bp.layer = v->layer;
    bp.layer2 = v->layer2;
    kvt_gen_params gp = {.max_tokens = n_gen,
                         .sampler = s,
                         .first_logits = o.logits,
                         .blend = v->ratio >= 0 ? &bp : NULL,
                         .doc_starts = starts,
                         .n_docs = n_docs};
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
static int32_t *render(const kvt_model *m, int32_t B, const char *q, const kvt_document *docs, size_t n_docs, size_t *n,
                       size_t *starts) {
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

/* A prompt of the set with its documents' spans. */
typedef struct {
    int32_t *p;
    size_t n, starts[KVT_RAG_MAX_K + 1], n_docs;
} bprompt;

/* --ratios: R, R@L or R@L+M each; after cold and exact. Returns the variant count, or -1. */
static int parse_variants(const char *ratios, variant *vs) {
    int nvar = 0;
    vs[nvar++] = (variant){.name = "cold", .ratio = -1, .cold = 1};
    vs[nvar++] = (variant){.name = "exact", .ratio = -1};
    for (const char *r = ratios; *r && nvar < MAX_VARIANTS;) {
        char *end;
        double x = strtod(r, &end);
        long l1 = KVT_BLEND_DEFAULT_LAYER, l2 = 0;
        if (*end == '@') l1 = strtol(end + 1, &end, 10);
        if (*end == '+') l2 = strtol(end + 1, &end, 10);
        if (end == r || x < 0 || x > 1 || l1 < 0 || l2 < 0 || l1 > 999 || l2 > 999 || (*end && *end != ',')) {
            fprintf(stderr, "bench_blend: --ratios takes R[@L[+M]] with R in [0, 1], got '%s'\n", r);
            return -1;
        }
        vs[nvar] = (variant){.ratio = (float)x, .layer = (int32_t)l1, .layer2 = (int32_t)l2};
        if (l2 > l1) snprintf(vs[nvar].name, sizeof vs[nvar].name, "approx %.2f@%d+%d", x, (int)l1, (int)l2);
        else snprintf(vs[nvar].name, sizeof vs[nvar].name, "approx %.2f@%d", x, (int)l1);
        nvar++;
        r = *end == ',' ? end + 1 : end;
    }
    return nvar;
}

/* The questions of q_path with the k best chunks of idx each, in score order. */
static int load_questions(const kvt_model *m, const kvt_rag_index *idx, const char *q_path, int k, bprompt *ps) {
    static char q[LINE_MAX_BYTES];
    int nq = 0;
    FILE *f = fopen(q_path, "r");
    if (!f) {
        perror(q_path);
        return -1;
    }
    while (nq < MAX_QUESTIONS && fgets(q, LINE_MAX_BYTES, f)) {
        q[strcspn(q, "\n")] = 0;
        if (!q[0]) continue;
        kvt_rag_hit hits[KVT_RAG_MAX_K];
        kvt_document docs[KVT_RAG_MAX_K];
        int32_t nh = kvt_rag_query(idx, q, k, hits);
        kvt_rag_plan(idx, KVT_RAG_ORDER_SCORE, hits, nh, docs);
        ps[nq].n_docs = (size_t)nh;
        ps[nq].p = render(m, kvt_rag_block_size(idx), q, docs, (size_t)nh, &ps[nq].n, ps[nq].starts);
        nq++;
    }
    fclose(f);
    return nq;
}

#define STORY_NEWLINE 13 /* <0x0A> in aidreams260K's vocabulary (the padding) */

/* --stories: every order of 3 of 5 stories, [BOS][s][s][s][Once upon a time, there was a]. */
static int story_prompts(const kvt_model *m, int32_t B, bprompt *ps) {
    static const char *const S[5] = {
        "Lily had a red ball. She played in the park.", "Tom saw a big dog. The dog was sad and lost.",
        "The sun was hot. Mom gave Ben a cold drink.",  "A little bird sat on the tree and sang a song.",
        "Sue found a box. Inside was a shiny toy car.",
    };
    static const int perm[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    const char *question = "Once upon a time, there was a";
    int np = 0;
    for (int a = 0; a < 5; a++)
        for (int b = a + 1; b < 5; b++)
            for (int c = b + 1; c < 5; c++)
                for (int pi = 0; pi < 6; pi++) {
                    const int set[3] = {a, b, c};
                    bprompt *o = &ps[np++];
                    o->p = kvt_xmalloc(512 * sizeof *o->p);
                    o->n = 0, o->n_docs = 3;
                    o->p[o->n++] = kvt_tokenizer_bos(m->tok);
                    for (int j = 0; j <= 3; j++) {
                        while (o->n % (size_t)B) o->p[o->n++] = STORY_NEWLINE;
                        o->starts[j] = o->n;
                        size_t nt;
                        int32_t *t = tok(m, j < 3 ? S[set[perm[pi][j]]] : question, 0, &nt);
                        if (o->n + nt + (size_t)B > 512) exit(1);
                        memcpy(o->p + o->n, t, nt * sizeof *t);
                        o->n += nt;
                        free(t);
                    }
                }
    return np;
}

/* A request's forward work in token-equivalents (layers run / nl): the
 * computed and stored tokens through every layer, every placed token through
 * layers [0, layer], and with two stages the candidates through [0, layer2]. */
static double work(const variant *v, const kvt_gen_result *r, int32_t nl) {
    const int32_t l1 = KVT_MIN(v->layer, nl - 1), l2 = KVT_MIN(v->layer2, nl - 1), k = r->blend.n_recomputed;
    double layers = (double)(r->n_computed + r->blend.n_stored) * nl + (double)r->blend.n_placed * (l1 + 1);
    if (l2 > l1 && k > 0) layers += (double)KVT_MIN(KVT_BLEND_STAGE1_WIDEN * k, r->blend.n_placed) * (l2 + 1);
    return layers / nl;
}

/* Runs every prompt through every variant and adds up what it measures against cold. */
static void measure(variant *vs, int nvar, const bprompt *ps, int np, int32_t n_gen, int32_t nv, int32_t nl) {
    for (int qi = 0; qi < np; qi++) {
        const bprompt *q = &ps[qi];
        run_out ref = {0};
        for (int i = 0; i < nvar; i++) {
            variant *v = &vs[i];
            run_out o = run(v, q->p, (int32_t)q->n, q->starts, q->n_docs, n_gen, nv);
            v->n++;
            v->computed += o.res.n_computed;
            v->approx += o.res.blend.n_placed - o.res.blend.n_recomputed;
            v->placed += o.res.blend.n_placed;
            v->stored += o.res.blend.n_stored;
            v->prefill_ms += o.res.prefill_ms;
            v->work += work(v, &o.res, nl);
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
        if ((qi + 1) % 10 == 0) fprintf(stderr, "bench_blend: %d/%d prompts\n", qi + 1, np);
    }
}

static void report(const variant *vs, int nvar) {
    printf("%-20s %9s %9s %8s %9s %8s %8s %9s %9s %10s\n", "variant", "computed", "approx", "stored", "work", "top-1",
           "greedy", "max dev", "mean dev", "prefill s");
    for (int i = 0; i < nvar; i++) {
        const variant *v = &vs[i];
        printf("%-20s %9lld %9lld %8lld %9.0f %4d/%-3d %4d/%-3d %9.4f %9.4f %10.1f\n", v->name, (long long)v->computed,
               (long long)v->approx, (long long)v->stored, v->work, v->cold ? v->n : v->top1, v->n,
               v->cold ? v->n : v->greedy, v->n, v->max_dev, v->sum_dev / (v->n ? v->n : 1), v->prefill_ms / 1e3);
    }
    printf("computed tokens, exact / approx:");
    for (int i = 2; i < nvar; i++)
        printf(" %s: %.2fx", vs[i].name + 7, (double)vs[1].computed / (double)KVT_MAX(vs[i].computed, 1));
    printf("\n");
}

/* [BOS system][chunk] for every chunk into every cached variant, as `kvtier rag prewarm`. */
static void prewarm(const kvt_model *m, const kvt_rag_index *idx, variant *vs, int nvar) {
    const int32_t B = kvt_rag_block_size(idx);
    for (int32_t ch = 0; ch < kvt_rag_n_chunks(idx); ch++) {
        const kvt_rag_chunk *c = kvt_rag_chunk_at(idx, ch);
        kvt_document d = {c->id, c->text};
        size_t n, starts[2];
        int32_t *p = render(m, B, "", &d, 1, &n, starts);
        for (int i = 0; i < nvar; i++) {
            if (vs[i].cold) continue;
            variant exact = vs[i];
            exact.ratio = -1;
            run_out o = run(&exact, p, (int32_t)n, starts, 1, 0, m->hp.n_vocab);
            free(o.tokens), free(o.logits);
        }
        free(p);
    }
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *index_path = NULL, *q_path = NULL, *ratios = "0,0.15,0.3,1";
    int threads = 2, k = 3, n_gen = 8, warm = 0, stories = 0;
    int32_t ctx = 4096, block = 8;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-m") && v) model_path = argv[++i];
        else if (!strcmp(a, "--index") && v) index_path = argv[++i];
        else if (!strcmp(a, "--questions") && v) q_path = argv[++i];
        else if (!strcmp(a, "-t") && v) threads = atoi(argv[++i]);
        else if (!strcmp(a, "-k") && v) k = atoi(argv[++i]);
        else if (!strcmp(a, "-n") && v) n_gen = atoi(argv[++i]);
        else if (!strcmp(a, "--ctx") && v) ctx = atoi(argv[++i]);
        else if (!strcmp(a, "--block") && v) block = atoi(argv[++i]);
        else if (!strcmp(a, "--ratios") && v) ratios = argv[++i];
        else if (!strcmp(a, "--prewarm")) warm = 1;
        else if (!strcmp(a, "--stories")) stories = 1;
        else {
            fprintf(stderr,
                    "usage: bench_blend -m MODEL (--index INDEX --questions FILE | --stories [--block B]) "
                    "[-t THREADS] [-k K] [-n N] [--ratios R[@L[+M]],...] [--prewarm] [--ctx N]\n");
            return 2;
        }
    }
    if (!model_path || (!stories && (!index_path || !q_path)) || k < 1 || k > KVT_RAG_MAX_K || block < 1) {
        fprintf(stderr, "bench_blend: -m, and --index with --questions or --stories, are needed\n");
        return 2;
    }
    kvt_model *m = NULL;
    kvt_rag_index *idx = NULL;
    if (kvt_model_load(model_path, kvt_model_default_params(), &m) || (!stories && kvt_rag_load(index_path, &idx))) {
        fprintf(stderr, "bench_blend: %s\n", kvt_errmsg());
        return 1;
    }
    const int32_t B = stories ? block : kvt_rag_block_size(idx), nv = m->hp.n_vocab;
    if (stories) ctx = KVT_MIN(ctx, m->hp.n_ctx_train);
    static bprompt ps[MAX_QUESTIONS];
    int np = stories ? story_prompts(m, B, ps) : load_questions(m, idx, q_path, k, ps);
    variant vs[MAX_VARIANTS] = {0};
    int nvar = parse_variants(ratios, vs);
    if (np < 0 || nvar < 0) return np < 0 ? 1 : 2;
    kvt_engine_params ep = kvt_engine_default_params();
    ep.block_size = B;
    ep.n_threads = threads;
    ep.n_ctx = ctx;
    ep.kv_active_bytes = 512ull << 20;
    for (int i = 0; i < nvar; i++) {
        if (kvt_engine_new(m, ep, &vs[i].e) ||
            (!vs[i].cold && kvt_cache_new(vs[i].e, kvt_cache_default_params(), &vs[i].c))) {
            fprintf(stderr, "bench_blend: %s\n", kvt_errmsg());
            return 1;
        }
    }
    if (warm && idx) prewarm(m, idx, vs, nvar);
    printf("bench_blend: %s, %d %s, block %d%s\n", model_path, np, stories ? "story prompts" : "questions", B,
           warm && idx ? ", prewarmed" : "");
    measure(vs, nvar, ps, np, n_gen, nv, m->hp.n_layer);
    report(vs, nvar);
    for (int i = 0; i < nvar; i++) {
        kvt_cache_free(vs[i].c);
        kvt_engine_free(vs[i].e);
    }
    for (int i = 0; i < np; i++) free(ps[i].p);
    kvt_rag_free(idx);
    kvt_model_free(m);
    return 0;
}
