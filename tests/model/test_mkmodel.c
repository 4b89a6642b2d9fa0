// SPDX-License-Identifier: MIT
/* mkmodel: every arch and weight type loads back with the requested shapes;
 * weights are deterministic per seed; the fingerprint separates seeds, types
 * and shapes; Q8_0/BF16/F16 weights stay close to the F32 ones. */
#include <math.h>
#include <string.h>

#include "mkmodel.h"
#include "model.h"
#include "testutil.h"

static kvt_model *make(const char *name, kvt_mkmodel_params p) {
    const char *path = kvt_test_path(kvt_test_tmpdir(), name);
    int rc = kvt_mkmodel(&p, path);
    CHECKF(rc == 0, "mkmodel %s: %s", name, kvt_errmsg());
    if (rc) return NULL;
    kvt_model *m = NULL;
    rc = kvt_model_load(path, kvt_model_default_params(), &m);
    CHECKF(rc == 0, "load %s: %s", name, kvt_errmsg());
    return m;
}

static int fp_eq(kvt_fingerprint a, kvt_fingerprint b) { return a.lo == b.lo && a.hi == b.hi; }

int main(void) {
    kvt_mkmodel_params p = kvt_test_tiny_params();
    p.ff = 96;
    p.vocab = 300;
    const uint32_t types[] = {KVT_TYPE_F32, KVT_TYPE_F16, KVT_TYPE_BF16, KVT_TYPE_Q8_0};
    const char *archs[] = {"llama", "qwen2"};
    kvt_model *ref = NULL;
    kvt_fingerprint fps[8];
    int nfp = 0;
    for (int a = 0; a < 2; a++) {
        for (int t = 0; t < 4; t++) {
            p.arch = archs[a];
            p.type = types[t];
            char name[64];
            snprintf(name, sizeof name, "%s-%d.gguf", archs[a], t);
            kvt_model *m = make(name, p);
            if (!m) continue;
            CHECK(m->hp.arch == (a ? KVT_ARCH_QWEN2 : KVT_ARCH_LLAMA));
            CHECK(m->hp.n_embd == 64 && m->hp.n_layer == 2 && m->hp.n_head == 4 && m->hp.n_head_kv == 2);
            CHECK(m->hp.head_dim == 16 && m->hp.n_ff == 96 && m->hp.n_vocab == 300);
            CHECK(m->layers[0].wq.type == types[t] && m->tok_embd.type == types[t]);
            CHECK((m->layers[1].bq != NULL) == (a == 1));
            CHECK(m->hp.rope_style == (a ? KVT_ROPE_NEOX : KVT_ROPE_NORM));
            CHECK(!m->hp.tied_output);
            fps[nfp++] = m->fingerprint;
            if (a == 0 && t == 0) {
                ref = m;
                continue;
            }
            if (a == 0) { /* same seed, other type: values close to F32 */
                float x[64], y[64];
                double maxd = 0;
                for (int r = 0; r < 8; r++) {
                    kvt_wmat_row_f32(&ref->layers[1].w_up, r, x);
                    kvt_wmat_row_f32(&m->layers[1].w_up, r, y);
                    for (int k = 0; k < 64; k++) maxd = fmax(maxd, fabs((double)x[k] - y[k]));
                }
                double tol = types[t] == KVT_TYPE_Q8_0 ? 2e-3 : types[t] == KVT_TYPE_BF16 ? 1e-3 : 2e-4;
                CHECKF(maxd > 0 && maxd < tol, "type %d: max diff %g", t, maxd);
            }
            kvt_model_free(m);
        }
    }
    for (int i = 0; i < nfp; i++)
        for (int j = i + 1; j < nfp; j++) CHECKF(!fp_eq(fps[i], fps[j]), "fingerprints %d and %d equal", i, j);

    /* determinism: same params, same fingerprint and bytes; another seed differs */
    p.arch = "llama";
    p.type = KVT_TYPE_F32;
    kvt_model *again = make("again.gguf", p);
    if (again && ref) {
        CHECK(fp_eq(again->fingerprint, ref->fingerprint));
        CHECK(!memcmp(again->layers[0].wk.data, ref->layers[0].wk.data, 64 * 32 * 4));
    }
    kvt_model_free(again);
    p.seed = 7;
    kvt_model *other = make("seed7.gguf", p);
    if (other && ref) CHECK(!fp_eq(other->fingerprint, ref->fingerprint));
    kvt_model_free(other);
    kvt_model_free(ref);

    /* tied output and a larger built-in vocab */
    p.tied = 1;
    p.vocab = 5000;
    kvt_model *tied = make("tied.gguf", p);
    if (tied) {
        CHECK(tied->hp.tied_output && tied->output.data == tied->tok_embd.data && tied->hp.n_vocab == 5000);
        kvt_model_free(tied);
    }

    /* invalid shapes are refused with a reason */
    kvt_mkmodel_params bad = kvt_mkmodel_default_params();
    bad.heads = 3;
    CHECK(kvt_mkmodel(&bad, kvt_test_path(kvt_test_tmpdir(), "bad.gguf")) == KVT_EARG);
    bad = kvt_mkmodel_default_params();
    bad.type = KVT_TYPE_Q8_0;
    bad.dim = 40;
    bad.heads = 4;
    bad.kv_heads = 4;
    CHECK(kvt_mkmodel(&bad, kvt_test_path(kvt_test_tmpdir(), "bad.gguf")) == KVT_EARG);
    bad = kvt_mkmodel_default_params();
    bad.arch = "gpt2";
    CHECK(kvt_mkmodel(&bad, kvt_test_path(kvt_test_tmpdir(), "bad.gguf")) == KVT_EARG && strstr(kvt_errmsg(), "arch"));
    return kvt_test_done("test_mkmodel");
}
