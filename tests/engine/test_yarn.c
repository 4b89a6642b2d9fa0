// SPDX-License-Identifier: MIT
/* YaRN rope scaling read from GGUF metadata (model.c) and applied by the
 * engine's rope (engine.c), checked against the published formula evaluated
 * here in double precision:
 * - the ramp bounds: pairs below floor(d ln(orig / (2 pi 32)) / (2 ln base))
 *   keep their unscaled angle, pairs above ceil(d ln(orig / (2 pi)) / (2 ln base))
 *   take angle / factor, the pairs between a linear blend;
 * - the magnitude of cos and sin: attn_factor * (1 + 0.1 ln factor), or with
 *   yarn_log_multiplier m, 1 + m ln factor; a pure rotation (unscaled) has 1;
 * - llama.cpp's defaults: the original context is the trained one when the key
 *   is absent; a factor of 1 is the plain rope;
 * - the context the model covers (original context x factor) and the warning
 *   past it. The logits against llama.cpp are tests/cli/test_eval_ref.sh's
 *   mk-llama-yarn-f16 row. */
#include <math.h>
#include <string.h>

#include "engine_impl.h"
#include "mkmodel.h"
#include "model.h"
#include "testutil.h"

#define BASE 10000.0
#define ROPE_DIM 16 /* kvt_test_tiny_params: dim 64, 4 heads */

static kvt_model *make(const char *file, const char *type, float factor, int32_t orig, float attn, float log_mul,
                       int32_t ctx) {
    kvt_mkmodel_params p = kvt_test_tiny_params();
    p.ctx = ctx;
    p.rope_scaling = type;
    p.rope_factor = factor;
    p.rope_orig_ctx = orig;
    p.rope_attn_factor = attn;
    p.rope_yarn_log_mul = log_mul;
    const char *path = kvt_test_path(kvt_test_tmpdir(), file);
    kvt_model *m = NULL;
    CHECKF(kvt_mkmodel(&p, path) == 0, "mkmodel %s: %s", file, kvt_errmsg());
    CHECKF(kvt_model_load(path, kvt_model_default_params(), &m) == 0, "load %s: %s", file, kvt_errmsg());
    return m;
}

static double corr_dim(double orig, double turns) {
    return ROPE_DIM * log(orig / (2.0 * M_PI * turns)) / (2.0 * log(BASE));
}

/* The engine's angles at pos against the formula; mscale the expected magnitude. */
static void check_angles(const kvt_model *m, double factor, double orig, double mscale, int32_t pos) {
    float cs[ROPE_DIM / 2], sn[ROPE_DIM / 2];
    const double lo = fmax(0.0, floor(corr_dim(orig, 32.0))), hi = fmin(ROPE_DIM - 1, ceil(corr_dim(orig, 1.0)));
    kvt_eng_rope_angles(m, pos, 0, 0, cs, sn);
    for (int i = 0; i < ROPE_DIM / 2; i++) {
        const double ext = pos * pow(BASE, -2.0 * i / ROPE_DIM), interp = ext / factor;
        const double y = fmin(1.0, fmax(0.0, (i - lo) / fmax(0.001, hi - lo)));
        const double theta = interp * y + ext * (1.0 - y);
        /* f32 angles built by repeated multiplication: a few ulps of theta */
        const double tol = 1e-6 * mscale * (1.0 + fabs(theta)) * (i + 1);
        CHECKF(fabs(cs[i] - mscale * cos(theta)) < tol && fabs(sn[i] - mscale * sin(theta)) < tol,
               "pos %d pair %d: (%g, %g) vs (%g, %g)", pos, i, (double)cs[i], (double)sn[i], mscale * cos(theta),
               mscale * sin(theta));
    }
    /* the rotation that moves a stored key has no magnitude */
    kvt_eng_rope_angles(m, pos, 0, 1, cs, sn);
    for (int i = 0; i < ROPE_DIM / 2; i++)
        CHECKF(fabs((double)cs[i] * cs[i] + (double)sn[i] * sn[i] - 1.0) < 1e-6, "unscaled pair %d", i);
}

static void test_yarn(void) {
    kvt_model *m = make("yarn.gguf", "yarn", 4.0f, 2048, 0.9f, 0.0f, 8192);
    if (!m) return;
    const kvt_hparams *hp = &m->hp;
    CHECK(hp->rope_scaling == KVT_ROPE_SCALING_YARN);
    CHECK(hp->rope_freq_scale == 0.25f && hp->rope_orig_ctx == 2048);
    /* 2 and 6 for this shape: pairs 0-1 extrapolate, 2-6 blend, 7 interpolates */
    CHECKF(hp->rope_yarn_corr[0] == (float)floor(corr_dim(2048, 32.0)) &&
               hp->rope_yarn_corr[1] == (float)ceil(corr_dim(2048, 1.0)),
           "ramp %g..%g", (double)hp->rope_yarn_corr[0], (double)hp->rope_yarn_corr[1]);
    CHECK(hp->rope_yarn_corr[0] == 2.0f && hp->rope_yarn_corr[1] == 6.0f);
    const double ms = 0.9 * (1.0 + 0.1 * log(4.0));
    CHECKF(fabs(hp->rope_yarn_mscale - ms) < 1e-6, "mscale %g vs %g", (double)hp->rope_yarn_mscale, ms);
    const int32_t pos[] = {0, 1, 7, 100, 1000};
    for (size_t k = 0; k < sizeof pos / sizeof pos[0]; k++) check_angles(m, 4.0, 2048, ms, pos[k]);
    CHECK(kvt_model_ctx_limit(m) == 8192);
    CHECK(kvt_model_warn_ctx(m, 8192) == 0);
    CHECK(kvt_model_warn_ctx(m, 8193) == 1);
    kvt_model_free(m);

    /* the original context grows the covered one past context_length */
    m = make("yarn-ext.gguf", "yarn", 4.0f, 4096, 0.0f, 0.0f, 4096);
    if (m) {
        CHECK(kvt_model_ctx_limit(m) == 16384);
        CHECK(kvt_model_warn_ctx(m, 16384) == 0);
        kvt_model_free(m);
    }
}

static void test_defaults(void) {
    /* no original_context_length: the trained context; no attn_factor: 1 */
    kvt_model *m = make("yarn-def.gguf", "yarn", 8.0f, 0, 0.0f, 0.0f, 1024);
    if (m) {
        CHECK(m->hp.rope_orig_ctx == 1024);
        const double ms = 1.0 + 0.1 * log(8.0);
        CHECKF(fabs(m->hp.rope_yarn_mscale - ms) < 1e-6, "mscale %g", (double)m->hp.rope_yarn_mscale);
        check_angles(m, 8.0, 1024, ms, 333);
        kvt_model_free(m);
    }
    /* yarn_log_multiplier m: magnitude 1 + m ln factor */
    m = make("yarn-log.gguf", "yarn", 4.0f, 2048, 0.0f, 0.2f, 8192);
    if (m) {
        const double ms = 1.0 + 0.2 * log(4.0);
        CHECKF(fabs(m->hp.rope_yarn_mscale - ms) < 1e-6, "mscale %g vs %g", (double)m->hp.rope_yarn_mscale, ms);
        check_angles(m, 4.0, 2048, ms, 100);
        kvt_model_free(m);
    }
    /* factor 1 (or absent): YaRN is the plain rope, bit for bit */
    kvt_model *y = make("yarn-1.gguf", "yarn", 0.0f, 0, 0.0f, 0.0f, 4096);
    kvt_model *n = make("plain.gguf", NULL, 0.0f, 0, 0.0f, 0.0f, 4096);
    if (y && n) {
        float c1[ROPE_DIM / 2], s1[ROPE_DIM / 2], c2[ROPE_DIM / 2], s2[ROPE_DIM / 2];
        for (int32_t pos = 0; pos < 4096; pos += 37) {
            kvt_eng_rope_angles(y, pos, 0, 0, c1, s1);
            kvt_eng_rope_angles(n, pos, 0, 0, c2, s2);
            CHECKF(!memcmp(c1, c2, sizeof c1) && !memcmp(s1, s2, sizeof s1), "pos %d", pos);
        }
        /* no scaling: the trained context is the limit, and past it a warning */
        CHECK(kvt_model_ctx_limit(n) == 4096);
        CHECK(kvt_model_warn_ctx(n, 4096) == 0 && kvt_model_warn_ctx(n, 4097) == 1);
    }
    kvt_model_free(y);
    kvt_model_free(n);
}

/* mkmodel refuses rope options it cannot write, naming the flag */
static void test_mkmodel_args(void) {
    kvt_mkmodel_params p = kvt_test_tiny_params();
    const char *path = kvt_test_path(kvt_test_tmpdir(), "bad.gguf");
    p.rope_scaling = "ntk";
    CHECK(kvt_mkmodel(&p, path) == KVT_EARG && strstr(kvt_errmsg(), "--rope-scaling"));
    p.rope_scaling = "yarn";
    p.rope_factor = -2.0f;
    CHECK(kvt_mkmodel(&p, path) == KVT_EARG && strstr(kvt_errmsg(), "--rope-factor"));
    p.rope_factor = 4.0f;
    p.arch = "phi3";
    p.rope_orig_ctx = 512;
    CHECK(kvt_mkmodel(&p, path) == KVT_EARG && strstr(kvt_errmsg(), "phi3"));
}

int main(void) {
    test_yarn();
    test_defaults();
    test_mkmodel_args();
    return kvt_test_done("test_yarn");
}
