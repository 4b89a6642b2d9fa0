// SPDX-License-Identifier: MIT
/* Approximate reuse's engine pieces (engine_blend.c):
 * - kvt_engine_rerope_page moves stored K to another position: layer 0's K
 *   depends only on the token and its position, so the K of a block computed
 *   at p and rotated by d must equal the K of the same tokens computed at
 *   p + d, to the rounding of the KV dtype, for the rope of every
 *   architecture (NORM llama, NEOX qwen2, gemma3's second rope on sliding
 *   layers); V is untouched and equals it bit for bit.
 * - kvt_engine_recompute of every token after a point, in order, gives a cold
 *   run's bytes exactly, and its deviation pass is 0 on tokens that are already exact. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine_impl.h"
#include "kv_quant.h"
#include "mkmodel.h"
#include "model.h"
#include "testutil.h"

#define B 16

/* K (transposed [hd][B]) and V ([B][hd]) of layer l, head g, of a page, as f32. */
static void read_kv(kvt_engine *e, int32_t page, int32_t l, int32_t g, float *k, float *v) {
    const kvt_hparams *hp = &kvt_engine_model(e)->hp;
    const uint8_t *pg = kvt_page_data_const(e, page);
    const size_t n = (size_t)hp->head_dim * B;
    const void *kd = pg + kvt_eng_kv_offset(e, l, 0, g, 0), *vd = pg + kvt_eng_kv_offset(e, l, 1, g, 0);
    if (kvt_engine_params_of(e).kv_dtype == KVT_KV_Q8_0) {
        kvt_kv_q8_dequant_columns(kd, B, B, hp->head_dim, k);
        kvt_kv_q8_dequant_rows(vd, B, hp->head_dim, v);
    } else if (kvt_engine_params_of(e).kv_dtype == KVT_KV_F16) {
        kvt_f16_to_f32_row(kd, k, (int64_t)n);
        kvt_f16_to_f32_row(vd, v, (int64_t)n);
    } else {
        memcpy(k, kd, n * sizeof(float));
        memcpy(v, vd, n * sizeof(float));
    }
}

/* A sequence of `lead` random tokens, then block T; returns the page holding T. */
static int32_t run_at(kvt_engine *e, int32_t lead, const int32_t *T, unsigned seed, int32_t *seq) {
    const int32_t nv = kvt_engine_n_vocab(e);
    int32_t *toks = malloc(((size_t)lead + B) * sizeof *toks);
    kvt_test_random_tokens(toks, lead, nv, &seed);
    memcpy(toks + lead, T, B * sizeof *T);
    CHECKF(kvt_seq_new(e, NULL, 0, 0, seq) == 0, "%s", kvt_errmsg());
    CHECKF(kvt_engine_feed(e, *seq, toks, lead + B, 0, NULL) == 0, "%s", kvt_errmsg());
    free(toks);
    int32_t np;
    const int32_t *pages = kvt_seq_pages(e, *seq, &np);
    return pages ? pages[lead / B] : -1;
}

/* Layer 0 of T computed at `from` and rotated to `to` against T computed at `to`. */
static void check_rerope(kvt_model *m, kvt_kv_dtype dt, int32_t from, int32_t to, const char *what) {
    kvt_engine_params ep = kvt_engine_default_params();
    ep.block_size = B;
    ep.n_pages = 128;
    ep.n_ctx = 1024;
    ep.kv_dtype = dt;
    kvt_engine *e = NULL;
    CHECKF(kvt_engine_new(m, ep, &e) == 0, "%s", kvt_errmsg());
    if (!e) return;
    const kvt_hparams *hp = &m->hp;
    int32_t T[B];
    unsigned seed = 7;
    kvt_test_random_tokens(T, B, hp->n_vocab, &seed);
    int32_t s1, s2, moved;
    int32_t p1 = run_at(e, from, T, 11, &s1), p2 = run_at(e, to, T, 12, &s2);
    CHECK(kvt_page_alloc(e, &moved) == 0);
    memcpy(kvt_page_data(e, moved), kvt_page_data_const(e, p1), kvt_page_bytes(e));
    CHECKF(kvt_engine_rerope_page(e, moved, to - from) == 0, "%s", kvt_errmsg());
    kvt_page_ref(e, p1);
    CHECK(kvt_engine_rerope_page(e, p1, 1) == KVT_EARG); /* shared: refused */
    kvt_page_unref(e, p1);
    const size_t n = (size_t)hp->head_dim * B;
    float *k1 = malloc(n * sizeof *k1), *v1 = malloc(n * sizeof *v1), *k2 = malloc(n * sizeof *k2),
          *v2 = malloc(n * sizeof *v2), *k0 = malloc(n * sizeof *k0), *v0 = malloc(n * sizeof *v0);
    /* f32 keeps only the angles' f32 rounding; f16 rounds the stored key twice; q8_0 quantizes it twice
     * (each block of 32 to 1/127 of its largest value) */
    const float tol = dt == KVT_KV_Q8_0 ? 3e-2f : dt == KVT_KV_F16 ? 4e-3f : 2e-4f;
    for (int32_t l = 0; l < hp->n_layer; l++) {
        float worst = 0, scale = 0, moved_most = 0;
        int v_same = 1;
        for (int32_t g = 0; g < hp->n_head_kv; g++) {
            read_kv(e, moved, l, g, k1, v1);
            read_kv(e, p2, l, g, k2, v2);
            read_kv(e, p1, l, g, k0, v0);
            for (size_t i = 0; i < n; i++) {
                scale = fmaxf(scale, fabsf(k2[i]));
                moved_most = fmaxf(moved_most, fabsf(k0[i] - k2[i]));
                if (l == 0) worst = fmaxf(worst, fabsf(k1[i] - k2[i]));
            }
            v_same &= !memcmp(v1, v0, n * sizeof *v1);             /* V copied as it is */
            if (l == 0) v_same &= !memcmp(v1, v2, n * sizeof *v1); /* and position-free at layer 0 */
        }
        CHECKF(v_same, "%s: V of layer %d changed", what, l);
        if (l) continue; /* the K of later layers depends on the context, which differs here */
        CHECKF(worst <= tol * fmaxf(scale, 1.0f), "%s: re-rotated K differs by %g (|K| up to %g)", what, worst, scale);
        CHECKF(moved_most > 10 * tol * fmaxf(scale, 1.0f), "%s: the positions are too close to test (%g)", what,
               moved_most);
    }
    free(k1), free(v1), free(k2), free(v2), free(k0), free(v0);
    kvt_page_unref(e, moved);
    kvt_seq_free(e, s1);
    kvt_seq_free(e, s2);
    kvt_engine_free(e);
}

static kvt_model *arch_model(const char *arch, int32_t heads) {
    kvt_mkmodel_params mp = kvt_mkmodel_default_params();
    mp.arch = arch;
    mp.dim = 64;
    mp.layers = 2;
    mp.heads = heads;
    mp.kv_heads = heads / 2;
    mp.ff = 128;
    mp.vocab = 1024;
    mp.swa = 32;
    char name[64];
    snprintf(name, sizeof name, "rerope-%s-%d.gguf", arch, heads);
    const char *path = kvt_test_path(kvt_test_tmpdir(), name);
    kvt_model *m = NULL;
    CHECKF(kvt_mkmodel(&mp, path) == 0 && kvt_model_load(path, kvt_model_default_params(), &m) == 0, "%s: %s", arch,
           kvt_errmsg());
    return m;
}

/* Recomputing everything after `at` in order, in place, over a sequence whose
 * K/V there were wrong gives a cold run's bytes. */
static void check_recompute(kvt_model *m) {
    kvt_engine *e = kvt_test_engine(m, B, 64, 512);
    if (!e) return;
    const int32_t n = 5 * B, at = 2 * B;
    int32_t toks[5 * B], other[5 * B], pos[5 * B];
    unsigned seed = 3;
    kvt_test_random_tokens(toks, n, m->hp.n_vocab, &seed);
    memcpy(other, toks, sizeof toks);
    kvt_test_random_tokens(other + at, n - at, m->hp.n_vocab, &seed); /* other tokens after `at` */
    int32_t cold = -1, warm = -1;
    CHECK(kvt_seq_new(e, NULL, 0, 0, &cold) == 0 && kvt_seq_new(e, NULL, 0, 0, &warm) == 0);
    CHECK(kvt_engine_feed(e, cold, toks, n, 0, NULL) == 0);
    CHECK(kvt_engine_feed(e, warm, other, n, 0, NULL) == 0);
    for (int32_t i = 0; i < n - at; i++) pos[i] = at + i;
    float dev[5 * B];
    /* the deviation pass over the wrong K/V: large; then recompute all */
    CHECKF(kvt_engine_recompute(e, warm, toks + at, pos, n - at, 1, dev) == 0, "%s", kvt_errmsg());
    CHECK(dev[0] > 0);
    CHECK(kvt_engine_recompute(e, warm, toks + at, pos, n - at, 0, NULL) == 0);
    const int32_t *pc = kvt_seq_pages(e, cold, NULL), *pw = kvt_seq_pages(e, warm, NULL);
    int same = 1;
    for (int32_t b = 0; b < n / B; b++)
        same &= !memcmp(kvt_page_data_const(e, pc[b]), kvt_page_data_const(e, pw[b]), kvt_page_bytes(e));
    CHECKF(same, "in-place recompute differs from a cold run");
    /* now exact: the deviation pass finds nothing to fix */
    CHECK(kvt_engine_recompute(e, warm, toks + at, pos, n - at, 1, dev) == 0);
    float most = 0;
    for (int32_t i = 0; i < n - at; i++) most = fmaxf(most, dev[i]);
    CHECKF(most == 0, "deviation of exact K/V is %g", most);
    /* refused: descending positions, a shared page */
    int32_t bad[2] = {at + 1, at};
    CHECK(kvt_engine_recompute(e, warm, toks, bad, 2, 0, NULL) == KVT_EARG);
    int32_t fork;
    CHECK(kvt_seq_new(e, pw, n / B, n, &fork) == 0);
    CHECK(kvt_engine_recompute(e, warm, toks + at, pos, 1, 0, NULL) == KVT_EARG);
    kvt_seq_free(e, fork);
    kvt_seq_free(e, cold);
    kvt_seq_free(e, warm);
    kvt_engine_free(e);
}

int main(void) {
    kvt_model *llama = kvt_test_tiny_model("rerope-llama.gguf", 1024);
    if (!llama) return 1;
    check_rerope(llama, KVT_KV_F32, B, 9 * B, "llama f32");
    check_rerope(llama, KVT_KV_F16, 3 * B, 40 * B, "llama f16");
    check_rerope(llama, KVT_KV_F32, 20 * B, 2 * B, "llama f32, moved back");
    check_recompute(llama);
    kvt_model_free(llama);
    const char *archs[] = {"qwen2", "gemma3", "phi3", "qwen3"};
    for (size_t i = 0; i < sizeof archs / sizeof *archs; i++) {
        kvt_model *m = arch_model(archs[i], 4);
        if (!m) continue;
        check_rerope(m, KVT_KV_F32, B, 9 * B, archs[i]);
        check_rerope(m, KVT_KV_F16, 2 * B, 30 * B, archs[i]);
        kvt_model_free(m);
    }
    kvt_model *wide = arch_model("llama", 2); /* head_dim 32, which q8_0 KV needs */
    if (wide) {
        check_rerope(wide, KVT_KV_Q8_0, 2 * B, 30 * B, "llama q8_0");
        kvt_model_free(wide);
    }
    return kvt_test_done("test_rerope");
}
