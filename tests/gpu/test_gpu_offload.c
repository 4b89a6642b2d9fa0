// SPDX-License-Identifier: MIT
/* Partial offload on Vulkan device 0 (lavapipe here): with n_gpu_layers N
 * below the layer count, the first N layers run on the GPU with their share
 * of each KV page in device memory, and the other layers and the output
 * matrix run on the CPU with their share in host memory (docs/gpu.md
 * "Partial offload"). For a llama model (F16 weights, f16 KV) and a gemma3
 * model (sliding windows with their own rope, Q8_0 weights, q8_0 KV), and N
 * of 1 and the layer count less one:
 *  - the logits at every position of a prompt stay within test_gpu_engine's
 *    bounds of the CPU engine's, and of the all-GPU engine's;
 *  - a prefill in one chunk, a chunked prefill and decode steps write the
 *    same page bytes, both shares, and give the same last logits;
 *  - warm equals cold: a prefix's pages copied out (to host memory mapped for
 *    the device and to ordinary memory), copied back into fresh pages and
 *    continued greedily give the cold run's tokens and logits, bit for bit;
 *    a page copied inside the pool (copy on write) keeps both shares;
 *  - each N has its own numerics id, none the all-GPU engine's;
 *  - a lost device fails the step and leaves the sequence and the pool as
 *    they were.
 * The cache's tiers (T1, T2 after a restart) over partial offload run in
 * test_expansion_gpu_ngl. No validation message may appear. Skips (77)
 * without a device. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "engine.h"
#include "gpu_engine_test.h"
#include "mkmodel.h"
#include "model.h"

#define B 16
#define N_PROMPT 40 /* two full pages and part of a third */
#define N_GEN 6

static double max_dlogit;

static kvt_model *make_model(const char *arch, int32_t layers, uint32_t type, const char *file) {
    kvt_mkmodel_params mp = kvt_test_tiny_params();
    mp.arch = arch;
    mp.layers = layers;
    mp.heads = 2;
    mp.kv_heads = 1; /* heads of 32: q8_0 KV needs a multiple of 32 */
    mp.type = type;
    mp.vocab = 512;
    mp.swa = 24; /* gemma3: a window shorter than the prompt */
    const char *path = kvt_test_path(kvt_test_tmpdir(), file);
    kvt_model *m = NULL;
    int rc = kvt_mkmodel(&mp, path);
    if (!rc) rc = kvt_model_load(path, kvt_model_default_params(), &m);
    CHECKF(rc == 0, "%s model: %s", arch, kvt_errmsg());
    return m;
}

/* device 0: the CPU; else Vulkan device 0 with ngl layers there (-1: all). */
static kvt_engine *engine_on(const kvt_model *m, int device, int32_t ngl, int32_t n_batch, kvt_kv_dtype dt) {
    return gpu_engine_on(m, device, ngl, B, 24, n_batch, dt);
}

/* e's logits at every position of p against the CPU's (lc) and the all-GPU engine's (la). */
static void check_logits(kvt_engine *e, const float *lc, const float *la, const int32_t *p, double tol,
                         const char *what) {
    const int32_t V = kvt_engine_n_vocab(e);
    float *l = gpu_all_logits(e, p, N_PROMPT);
    if (!l || !lc || !la) {
        free(l);
        return;
    }
    char name[160];
    snprintf(name, sizeof name, "%s against the CPU", what);
    gpu_logit_cmp rc = gpu_compare_logits(lc, l, N_PROMPT, V, tol, name);
    snprintf(name, sizeof name, "%s against the all-GPU engine", what);
    gpu_logit_cmp ra = gpu_compare_logits(la, l, N_PROMPT, V, tol, name);
    printf("offload: %s: top-1 agrees with the CPU at %d/%d positions (max |dlogit| %.3g, logits up to %.3g), "
           "with all-GPU at %d (%.3g)\n",
           what, rc.agree, N_PROMPT, rc.dmax, rc.lmax, ra.agree, ra.dmax);
    if (rc.dmax > max_dlogit) max_dlogit = rc.dmax;
    free(l);
}

/* Feeds p[0..n) to a fresh sequence in steps of step tokens; the last logits into last. */
static int32_t feed_steps(kvt_engine *e, const int32_t *p, int32_t n, int32_t step, float *last) {
    int32_t s = -1;
    int rc = kvt_seq_new(e, NULL, 0, 0, &s);
    for (int32_t i = 0; !rc && i < n; i += step) {
        const int32_t k = KVT_MIN(step, n - i);
        rc = kvt_engine_feed(e, s, p + i, k, 0, i + k == n ? last : NULL);
    }
    CHECKF(rc == 0, "feeding in steps of %d: %s", step, kvt_errmsg());
    return s;
}

/* One chunk, chunks of 5 and single tokens write the same bytes in both shares of two full pages. */
static void check_decode_equals_prefill(kvt_engine *e, const int32_t *p, const char *what) {
    const int32_t V = kvt_engine_n_vocab(e), steps[] = {N_PROMPT, 5, 1};
    const size_t pb = kvt_page_bytes(e);
    float *last = malloc(3 * (size_t)V * sizeof(float));
    uint8_t *bytes[3];
    for (int k = 0; k < 3; k++) {
        int32_t s = feed_steps(e, p, N_PROMPT, steps[k], last + (size_t)k * V);
        bytes[k] = gpu_pages_of(e, s, 2);
        kvt_seq_free(e, s);
    }
    for (int k = 1; k < 3; k++) {
        CHECKF(!memcmp(bytes[0], bytes[k], 2 * pb), "%s: steps of %d wrote other KV bytes than one chunk", what,
               steps[k]);
        CHECKF(!memcmp(last, last + (size_t)k * V, (size_t)V * sizeof(float)),
               "%s: steps of %d gave other last logits than one chunk", what, steps[k]);
    }
    for (int k = 0; k < 3; k++) free(bytes[k]);
    free(last);
}

/* Greedy continuation of seq for N_GEN tokens: the tokens, and every step's logits appended to l. */
static void greedy(kvt_engine *e, int32_t seq, const float *first, int32_t *toks, float *l) {
    const int32_t V = kvt_engine_n_vocab(e);
    memcpy(l, first, (size_t)V * sizeof(float));
    for (int32_t i = 0; i < N_GEN; i++) {
        toks[i] = gpu_argmax(l + (size_t)i * V, V);
        if (i + 1 < N_GEN)
            CHECKF(kvt_engine_feed(e, seq, &toks[i], 1, 0, l + (size_t)(i + 1) * V) == 0, "decode: %s", kvt_errmsg());
    }
}

/* Warm equals cold: the prompt's two full pages go out (one into memory mapped for the device, one into
 * ordinary memory), come back into fresh pages, and the rest of the prompt and the greedy reply on them match
 * the cold run bit for bit. A page copied inside the pool keeps both shares. */
static void check_warm_equals_cold(kvt_engine *e, const int32_t *p, const char *what) {
    const int32_t V = kvt_engine_n_vocab(e);
    const size_t pb = kvt_page_bytes(e);
    float *first = malloc((size_t)V * sizeof(float)), *lcold = malloc((size_t)N_GEN * V * sizeof(float)),
          *lwarm = malloc((size_t)N_GEN * V * sizeof(float));
    int32_t tcold[N_GEN], twarm[N_GEN];
    int32_t cold = feed_steps(e, p, N_PROMPT, N_PROMPT, first);
    greedy(e, cold, first, tcold, lcold);
    int32_t np;
    const int32_t *pt = kvt_seq_pages(e, cold, &np);
    uint8_t *pinned = kvt_engine_host_alloc(e, pb), *plain = malloc(pb);
    int32_t fresh[2] = {-1, -1}, warm = -1;
    CHECKF(pinned && np >= 2, "%s: host memory for the device: %s", what, kvt_errmsg());
    kvt_page_out out[2] = {{pt[0], pinned}, {pt[1], plain}};
    int rc = pinned ? kvt_pages_copy_out(e, out, 2) : -1;
    for (int i = 0; !rc && i < 2; i++) rc = kvt_page_alloc(e, &fresh[i]);
    kvt_page_in in[2] = {{fresh[0], pinned}, {fresh[1], plain}};
    if (!rc) rc = kvt_pages_copy_in(e, in, 2);
    if (!rc) rc = kvt_seq_new(e, fresh, 2, 2 * B, &warm);
    for (int i = 0; i < 2; i++)
        if (fresh[i] >= 0) kvt_page_unref(e, fresh[i]); /* the sequence holds them now */
    if (!rc) rc = kvt_engine_feed(e, warm, p + 2 * B, N_PROMPT - 2 * B, 0, first);
    CHECKF(rc == 0, "%s: restoring two pages: %s", what, kvt_errmsg());
    if (!rc) {
        greedy(e, warm, first, twarm, lwarm);
        CHECKF(!memcmp(tcold, twarm, sizeof tcold), "%s: the warm reply differs from the cold one", what);
        CHECKF(!memcmp(lcold, lwarm, (size_t)N_GEN * V * sizeof(float)), "%s: warm logits differ from cold bits", what);
    }
    /* a copy inside the pool: both shares */
    int32_t dst = -1;
    uint8_t *a = malloc(pb), *b = malloc(pb);
    rc = kvt_page_alloc(e, &dst);
    if (!rc) rc = kvt_pages_copy(e, &dst, &pt[1], 1);
    kvt_page_out o2[2] = {{pt[1], a}, {dst, b}};
    if (!rc) rc = kvt_pages_copy_out(e, o2, 2);
    CHECKF(rc == 0 && !memcmp(a, b, pb), "%s: a page copied in the pool differs (rc %d)", what, rc);
    if (dst >= 0) kvt_page_unref(e, dst);
    kvt_seq_free(e, cold);
    if (warm >= 0) kvt_seq_free(e, warm);
    kvt_engine_host_free(e, pinned);
    free(plain), free(a), free(b), free(first), free(lcold), free(lwarm);
}

/* A lost device fails the step; the sequence keeps its length and the pool its free pages. */
static void check_lost_device(const kvt_model *m, int32_t ngl, kvt_kv_dtype dt, const int32_t *p) {
    kvt_engine *e = engine_on(m, 1, ngl, 512, dt);
    if (!e) return;
    int32_t s = feed_steps(e, p, B + 1, B + 1, NULL);
    const int32_t free0 = kvt_page_free_count(e);
    setenv("KVT_VK_LOSE_AFTER", "1", 1);
    int rc = kvt_engine_feed(e, s, p + B + 1, B, 0, NULL);
    unsetenv("KVT_VK_LOSE_AFTER");
    CHECKF(rc != 0 && strstr(kvt_errmsg(), "lost"), "-ngl %d: a lost device gave rc %d: %s", ngl, rc, kvt_errmsg());
    CHECKF(kvt_seq_len(e, s) == B + 1 && kvt_page_free_count(e) == free0,
           "-ngl %d: after the failed step %d tokens (not %d), %d free pages (not %d)", ngl, kvt_seq_len(e, s), B + 1,
           kvt_page_free_count(e), free0);
    kvt_engine_free(e);
}

static void check_model(const kvt_model *m, const char *name, kvt_kv_dtype dt, double tol) {
    const int32_t L = m->hp.n_layer, ngls[] = {1, L - 1};
    int32_t p[N_PROMPT];
    unsigned seed = 5;
    kvt_test_random_tokens(p, N_PROMPT, m->hp.n_vocab, &seed);
    kvt_engine *ec = engine_on(m, 0, -1, 512, dt), *ea = engine_on(m, 1, -1, 512, dt);
    float *lc = ec ? gpu_all_logits(ec, p, N_PROMPT) : NULL, *la = ea ? gpu_all_logits(ea, p, N_PROMPT) : NULL;
    const char *all_id = ea ? kvt_engine_numerics_id(ea) : "", *first_id = NULL;
    char first[128] = "";
    for (int k = 0; k < 2; k++) {
        char what[96];
        snprintf(what, sizeof what, "%s (%s KV), -ngl %d of %d", name, kvt_kv_dtype_name(dt), ngls[k], L);
        kvt_engine *e = engine_on(m, 1, ngls[k], 512, dt);
        if (!e) continue;
        const char *id = kvt_engine_numerics_id(e);
        CHECKF(strcmp(id, all_id) && (!first_id || strcmp(id, first)), "%s: numerics id %s is not its own", what, id);
        snprintf(first, sizeof first, "%s", id);
        first_id = first;
        check_logits(e, lc, la, p, tol, what);
        check_decode_equals_prefill(e, p, what);
        check_warm_equals_cold(e, p, what);
        kvt_engine_free(e);
    }
    check_lost_device(m, 1, dt, p);
    free(lc), free(la);
    kvt_engine_free(ec), kvt_engine_free(ea);
}

int main(void) {
    kvt_test_gpu_variant();
    gpu_test_start();
    kvt_model *llama = make_model("llama", 3, KVT_TYPE_F16, "offload_llama.gguf");
    kvt_model *gemma = make_model("gemma3", 3, KVT_TYPE_Q8_0, "offload_gemma3.gguf");
    if (llama) check_model(llama, "llama F16", KVT_KV_F16, GPU_LOGIT_TOL);
    if (gemma) check_model(gemma, "gemma3 Q8_0", KVT_KV_Q8_0, GPU_LOGIT_TOL_Q8);
    printf("offload: largest |dlogit| against the CPU %.3g (bounds %g, Q8_0 %g)\n", max_dlogit, GPU_LOGIT_TOL,
           GPU_LOGIT_TOL_Q8);
    gpu_test_no_validation_messages(0);
    kvt_model_free(llama);
    kvt_model_free(gemma);
    return kvt_test_done("test_gpu_offload");
}
