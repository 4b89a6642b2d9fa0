// SPDX-License-Identifier: MIT
/* The tensor-core F16 matmul (KVT_VK_COOPMAT=1, VK_NV_cooperative_matrix,
 * src/gpu/vk_coopmat.c):
 *  - on any device: KVT_VK_COOPMAT=1 where the device cannot run it opens the
 *    device on the subgroup-free path with the numerics id it has without the
 *    switch; where it can, the path is on and the id differs; a value other
 *    than 0 or 1 is refused naming the variable;
 *  - on a device that has the extension (a real GPU; lavapipe has none, so in
 *    CI this part skips, saying why): the MMA matmul against the CPU's F16
 *    matmul (activations rounded to f16 alike) and against the subgroup-free
 *    kernel (f32 activations), within printed bounds, over shapes whose rows
 *    and columns are not multiples of the tile, with 1, 2, 7, 16, 33 and 64
 *    tokens; each token's output bits the same for every token count; results
 *    placed at ldy / y_off and nothing else written; then the engine with the
 *    path on: logits against the CPU engine, decode = chunked prefill =
 *    prefill (KV bytes and logits), and greedy warm = cold from T0 and T2.
 * No validation message may appear. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "engine.h"
#include "gpu_engine_test.h"
#include "gpu_fwd_test.h"
#include "model.h"
#include "ops.h"

#define B 16
#define N_GEN 3
#define MAX_TOK 64

static const uint32_t COUNTS[] = {1, 2, 7, 16, 33, MAX_TOK};
#define N_COUNTS (sizeof COUNTS / sizeof COUNTS[0])

static double err_cpu, err_ref; /* the largest errors seen, relative to sum |w x| */

/* Opens device 0 with KVT_VK_COOPMAT set to v (NULL: unset); NULL (a failed check) if it cannot. */
static kvt_gpu_dev *open_with(const char *v) {
    if (v) setenv("KVT_VK_COOPMAT", v, 1);
    else unsetenv("KVT_VK_COOPMAT");
    kvt_gpu_dev *d = NULL;
    int rc = kvt_gpu_open(0, &d);
    CHECKF(rc == 0, "open with KVT_VK_COOPMAT=%s: %s", v ? v : "(unset)", kvt_errmsg());
    return d;
}

/* The switch on every device; 1 when this one runs the MMA path. */
static int check_switch(void) {
    kvt_gpu_dev *d0 = open_with(NULL), *d1 = open_with("1"), *bad = NULL;
    setenv("KVT_VK_COOPMAT", "yes", 1);
    int rc = kvt_gpu_open(0, &bad);
    CHECKF(rc == KVT_EARG && strstr(kvt_errmsg(), "KVT_VK_COOPMAT"), "KVT_VK_COOPMAT=yes: rc %d, '%s'", rc,
           kvt_errmsg());
    kvt_gpu_close(bad);
    int on = 0;
    if (d0 && d1) {
        const kvt_gpu_info *a = kvt_gpu_dev_info(d0), *b = kvt_gpu_dev_info(d1);
        printf("gpu coopmat: '%s': %s; with KVT_VK_COOPMAT=1 the path is %s\n", b->name, b->coopmat_shapes,
               b->coopmat_on ? "on" : "off");
        CHECKF(!a->coopmat_on, "the path is on without KVT_VK_COOPMAT");
        CHECKF(b->coopmat_on == b->coopmat, "KVT_VK_COOPMAT=1: on %d where the device can run it %d", b->coopmat_on,
               b->coopmat);
        if (b->coopmat_on) {
            CHECKF(strcmp(a->numerics, b->numerics) && strstr(b->numerics, "-nvcm"),
                   "the numerics id does not say the MMA path is on: '%s' against '%s'", b->numerics, a->numerics);
            CHECKF(b->cm_m && b->cm_n && b->cm_k && b->cm_wn >= 1 && b->cm_subgroup, "shape %ux%ux%u, %u tiles",
                   b->cm_m, b->cm_n, b->cm_k, b->cm_wn);
        } else {
            CHECKF(!strcmp(a->numerics, b->numerics), "the numerics id changed with the path off: '%s', '%s'",
                   a->numerics, b->numerics);
        }
        on = b->coopmat_on;
    }
    kvt_gpu_close(d0);
    kvt_gpu_close(d1);
    return on;
}

/* Runs w on x (n_tok tokens) into y at ldy = rows + 3, y_off = 2, the rest of y preset to a marker; 0 or a failed
 * check. */
static int gpu_mm(kvt_gpu_dev *d, kvt_gpu_kernels *k, const kvt_gpu_wmat *w, const float *x, uint32_t cols,
                  uint32_t rows, uint32_t n_tok, float *y) {
    const uint32_t ldy = rows + 3;
    size_t ny = (size_t)n_tok * ldy;
    memset(y, 0xff, ny * 4);
    kvt_gpu_buf *bx = fwd_buf(d, (uint64_t)n_tok * cols * 4, x), *by = fwd_buf(d, ny * 4, y);
    int rc = bx && by ? 0 : -1;
    if (!rc) {
        rc = kvt_gpu_begin(d);
        if (!rc) rc = fwd_submit(d, kvt_gpu_rec_matmul(k, w, by, ldy, 2, bx, n_tok), "matmul");
    }
    if (!rc) rc = fwd_get(d, by, y, ny * 4);
    kvt_gpu_buf_free(bx);
    kvt_gpu_buf_free(by);
    return rc;
}

/* Long: one shape: the CPU and the subgroup-free kernel against the MMA path at 64 tokens, then every count's bits. */
static void check_shape(kvt_gpu_dev *dc, kvt_gpu_kernels *kc, kvt_gpu_dev *dr, kvt_gpu_kernels *kr, uint32_t rows,
                        uint32_t cols) {
    const uint32_t ldy = rows + 3;
    uint16_t *w = malloc((size_t)rows * cols * 2);
    float *x = malloc((size_t)MAX_TOK * cols * 4), *yc = malloc((size_t)MAX_TOK * rows * 4);
    float *ym = malloc((size_t)MAX_TOK * ldy * 4), *yr = malloc((size_t)MAX_TOK * ldy * 4);
    float *yn = malloc((size_t)MAX_TOK * ldy * 4);
    for (size_t i = 0; i < (size_t)rows * cols; i++) w[i] = kvt_f32_to_f16(fwd_unit());
    for (size_t i = 0; i < (size_t)MAX_TOK * cols; i++) x[i] = fwd_unit() * ldexpf(1.0f, (int)(i % 7) - 3);
    kvt_wmat wm = {.type = KVT_TYPE_F16, .rows = rows, .cols = cols, .data = w, .row_bytes = (size_t)cols * 2};
    kvt_matmul(NULL, &wm, x, cols, MAX_TOK, yc, rows);
    kvt_gpu_wmat *mc = NULL, *mr = NULL;
    int rc = kvt_gpu_wmat_new(dc, KVT_TYPE_F16, rows, cols, w, (size_t)cols * 2, &mc);
    if (!rc) rc = kvt_gpu_wmat_new(dr, KVT_TYPE_F16, rows, cols, w, (size_t)cols * 2, &mr);
    CHECKF(rc == 0, "%ux%u: %s", rows, cols, kvt_errmsg());
    if (rc || gpu_mm(dc, kc, mc, x, cols, rows, MAX_TOK, ym) || gpu_mm(dr, kr, mr, x, cols, rows, MAX_TOK, yr))
        goto out;
    /* Bounds, relative to S = sum |w x|: against the CPU (the same f16 activations) only the order and rounding
     * of the f32 sums differ: an MMA may align its products and accumulator with few guard bits and truncate,
     * a few ulps of its largest term, and an output is ceil(cols / K) chained MMAs: (cols / K + 16) * 2^-20.
     * Against the subgroup-free kernel the activations are f32 there, f16 here: 2^-11 of each more. */
    const uint32_t k_tile = kvt_gpu_dev_info(dc)->cm_k;
    const double tol_cpu = ((double)cols / k_tile + 16) * ldexp(1, -20), tol_ref = tol_cpu + ldexp(1, -11);
    int over_cpu = 0, over_ref = 0, written = 1;
    for (uint32_t t = 0; t < MAX_TOK; t++) {
        for (uint32_t r = 0; r < rows; r++) {
            double s = 0;
            for (uint32_t c = 0; c < cols; c++)
                s += fabs((double)kvt_f16_to_f32(w[(size_t)r * cols + c]) * x[(size_t)t * cols + c]);
            s = s > 0 ? s : 1;
            double m = ym[(size_t)t * ldy + 2 + r], ec = fabs(m - yc[(size_t)t * rows + r]) / s,
                   er = fabs(m - yr[(size_t)t * ldy + 2 + r]) / s;
            over_cpu += !(ec <= tol_cpu), over_ref += !(er <= tol_ref);
            err_cpu = fmax(err_cpu, ec), err_ref = fmax(err_ref, er);
        }
        uint32_t *u = (uint32_t *)(ym + (size_t)t * ldy);
        written &= u[0] == 0xffffffffu && u[1] == 0xffffffffu && u[rows + 2] == 0xffffffffu;
    }
    CHECKF(over_cpu == 0, "%ux%u: %d outputs differ from the CPU's by more than %.3g of sum |w x|", rows, cols,
           over_cpu, tol_cpu);
    CHECKF(over_ref == 0, "%ux%u: %d outputs differ from the subgroup-free kernel's by more than %.3g of sum |w x|",
           rows, cols, over_ref, tol_ref);
    CHECKF(written, "%ux%u: the MMA matmul wrote outside its rows of y (ldy %u, y_off 2)", rows, cols, ldy);
    for (size_t i = 0; i < N_COUNTS; i++) {
        uint32_t n = COUNTS[i];
        if (gpu_mm(dc, kc, mc, x, cols, rows, n, yn)) break;
        int same = 1;
        for (uint32_t t = 0; t < n; t++)
            same &= !memcmp(yn + (size_t)t * ldy + 2, ym + (size_t)t * ldy + 2, (size_t)rows * 4);
        CHECKF(same, "%ux%u: a token's bits with %u tokens differ from its bits with %d", rows, cols, n, MAX_TOK);
    }
out:
    kvt_gpu_wmat_free(mc), kvt_gpu_wmat_free(mr);
    free(w), free(x), free(yc), free(ym), free(yr), free(yn);
}

static void check_kernels(void) {
    kvt_gpu_dev *dc = open_with("1"), *dr = open_with("0");
    kvt_gpu_kernels *kc = NULL, *kr = NULL;
    int rc = dc && dr ? kvt_gpu_kernels_new(dc, &kc) : -1;
    if (!rc) rc = kvt_gpu_kernels_new(dr, &kr);
    CHECKF(rc == 0, "kernels: %s", kvt_errmsg());
    /* rows and columns on and off the tile (16x16x16 MMAs, 64 rows and 64 columns a step), odd columns (a row
     * starting mid-word), one row, and a 1b-sized projection */
    static const uint32_t shapes[][2] = {{16, 16},  {1, 64},    {17, 40},    {64, 64},
                                         {67, 130}, {100, 257}, {130, 1000}, {2048, 2048}};
    for (size_t i = 0; !rc && i < sizeof shapes / sizeof shapes[0]; i++)
        check_shape(dc, kc, dr, kr, shapes[i][0], shapes[i][1]);
    printf("gpu coopmat: largest error against the CPU %.3g, against the subgroup-free kernel %.3g (of sum |w x|)\n",
           err_cpu, err_ref);
    kvt_gpu_kernels_free(kc), kvt_gpu_kernels_free(kr);
    kvt_gpu_close(dc), kvt_gpu_close(dr);
}

static kvt_engine *engine_on(const kvt_model *m, int32_t device, int32_t n_pages, int32_t n_batch) {
    return gpu_engine_on(m, device, -1, B, n_pages, n_batch, kvt_engine_default_params().kv_dtype);
}

/* Long: prefill, chunked prefill (chunks of 5) and decode on the MMA path: the same KV bytes and last logits. */
static void check_decode_equals_prefill(const kvt_model *m, kvt_engine *e) {
    enum { N = 2 * B };
    int32_t p[N], V = m->hp.n_vocab;
    unsigned seed = 11;
    kvt_test_random_tokens(p, N, V, &seed);
    kvt_engine *ec = engine_on(m, 1, 16, 5);
    if (!ec) return;
    int32_t s1 = -1, s2 = -1, s3 = -1;
    float *l = malloc((size_t)V * 4 * 3);
    CHECK(kvt_seq_new(e, NULL, 0, 0, &s1) == 0 && kvt_engine_feed(e, s1, p, N, 0, l) == 0);
    CHECK(kvt_seq_new(ec, NULL, 0, 0, &s2) == 0 && kvt_engine_feed(ec, s2, p, N, 0, l + V) == 0);
    CHECK(kvt_seq_new(e, NULL, 0, 0, &s3) == 0);
    for (int32_t i = 0; i < N; i++) CHECK(kvt_engine_feed(e, s3, p + i, 1, 0, l + 2 * V) == 0);
    uint8_t *a = gpu_pages_of(e, s1, N / B), *b = gpu_pages_of(ec, s2, N / B), *c = gpu_pages_of(e, s3, N / B);
    size_t bytes = (size_t)(N / B) * kvt_page_bytes(e);
    CHECKF(memcmp(a, b, bytes) == 0, "MMA path: chunked prefill wrote other KV bytes than one prefill");
    CHECKF(memcmp(a, c, bytes) == 0, "MMA path: decode steps wrote other KV bytes than a prefill of the same tokens");
    CHECKF(memcmp(l, l + V, (size_t)V * 4) == 0 && memcmp(l, l + 2 * V, (size_t)V * 4) == 0,
           "MMA path: the last token's logits differ between prefill, chunked prefill and decode");
    free(a), free(b), free(c), free(l);
    if (s1 >= 0) kvt_seq_free(e, s1);
    if (s3 >= 0) kvt_seq_free(e, s3);
    kvt_engine_free(ec);
}

/* Greedy runs warm from T0 (the same engine and cache) and T2 (a fresh engine and cache on the same directory)
 * equal the cold run on e, bit for bit. */
static void check_warm_equals_cold(const kvt_model *m, kvt_engine *e) {
    enum { N = 3 * B + 5 };
    int32_t p[N];
    unsigned seed = 23;
    kvt_test_random_tokens(p, N, m->hp.n_vocab, &seed);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/gpu_coopmat_t2", kvt_test_tmpdir());
    kvt_test_gen cold = kvt_test_generate(e, NULL, p, N, N_GEN, NULL);
    for (int round = 0; round < 2; round++) { /* round 0 fills T0 and T2, round 1 is a new process's engine */
        kvt_engine *w = engine_on(m, 1, 12, 512);
        kvt_cache *c = w ? kvt_test_cache(w, dir, 64u << 20) : NULL;
        if (c) {
            kvt_test_gen g1 = kvt_test_generate(w, c, p, N, N_GEN, NULL);
            int tier = round ? KVT_TIER_T2 : KVT_TIER_T0;
            kvt_test_gen g2 = round ? (kvt_test_gen){0} : kvt_test_generate(w, c, p, N, N_GEN, NULL);
            const kvt_test_gen *warm = round ? &g1 : &g2;
            CHECKF(warm->res.tier_tokens[tier] == 3 * B, "MMA path: %s restored %d tokens, not %d", round ? "T2" : "T0",
                   warm->res.tier_tokens[tier], 3 * B);
            CHECKF(kvt_test_same(&cold, &g1) && kvt_test_same(&cold, warm),
                   "MMA path: the run warm from %s differs from the cold run", round ? "T2" : "T0");
            CHECK(kvt_cache_flush(c) == 0);
            kvt_test_gen_free(&g1);
            if (!round) kvt_test_gen_free(&g2);
        }
        kvt_cache_free(c);
        kvt_engine_free(w);
    }
    kvt_test_gen_free(&cold);
}

static void check_engine(void) {
    setenv("KVT_VK_COOPMAT", "1", 1);
    kvt_model *m = kvt_test_tiny_model_typed("gpu_coopmat_f16.gguf", 512, KVT_TYPE_F16);
    CHECK(m != NULL);
    if (!m) return;
    int32_t p[48], V = m->hp.n_vocab;
    unsigned seed = 7;
    kvt_test_random_tokens(p, 48, V, &seed);
    kvt_engine *ec = engine_on(m, 0, 16, 512), *eg = engine_on(m, 1, 16, 512);
    float *lc = ec ? gpu_all_logits(ec, p, 48) : NULL, *lg = eg ? gpu_all_logits(eg, p, 48) : NULL;
    if (lc && lg) {
        gpu_logit_cmp r = gpu_compare_logits(lc, lg, 48, V, GPU_LOGIT_TOL, "MMA path");
        printf("gpu coopmat: engine logits against the CPU: top-1 agrees at %d/48, max |dlogit| %.3g (bound %g)\n",
               r.agree, r.dmax, GPU_LOGIT_TOL);
    }
    if (eg)
        CHECKF(strstr(kvt_engine_numerics_id(eg), "-nvcm") != NULL, "engine numerics id '%s'",
               kvt_engine_numerics_id(eg));
    free(lc), free(lg);
    kvt_engine_free(ec);
    if (eg) check_decode_equals_prefill(m, eg);
    if (eg) check_warm_equals_cold(m, eg);
    kvt_engine_free(eg);
    kvt_model_free(m);
}

int main(void) {
    gpu_test_start();
    fwd_seed("gpu coopmat");
    if (check_switch()) {
        check_kernels();
        check_engine();
    } else {
        kvt_test_skip_part("the MMA matmul and engine checks: device 0 has no usable VK_NV_cooperative_matrix "
                           "(lavapipe has none; they run on a GPU that has it, e.g. in bench/gpu.sh)");
    }
    unsetenv("KVT_VK_COOPMAT");
    gpu_test_no_validation_messages(0);
    return kvt_test_done("test_gpu_coopmat");
}
