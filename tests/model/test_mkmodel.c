// SPDX-License-Identifier: MIT
/* mkmodel: every arch and weight type loads back with the requested shapes;
 * weights are deterministic per seed; the fingerprint separates seeds, types
 * and shapes; Q8_0/BF16/F16 weights stay close to the F32 ones; heads of
 * their own width (head_dim) shape every projection of every arch. */
#include <math.h>
#include <string.h>

#include "common.h"
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

    /* heads of their own width: q is heads x head_dim, not dim, in every projection (phi3's fused one,
     * qwen2's q bias, qwen3's head norms), and the width is the file's key_length and rope dimension */
    const char *hd_archs[] = {"llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3"};
    for (size_t a = 0; a < KVT_ARRAY_LEN(hd_archs); a++) {
        kvt_mkmodel_params h = kvt_test_tiny_params();
        h.arch = hd_archs[a];
        h.dim = 96;
        h.heads = 5; /* 96 is no multiple of 5: the width comes from head_dim alone */
        h.kv_heads = 1;
        h.head_dim = 48;
        h.vocab = 300;
        char name[64];
        snprintf(name, sizeof name, "hd-%s.gguf", hd_archs[a]);
        kvt_model *m = make(name, h);
        if (!m) continue;
        const kvt_layer *l = &m->layers[1];
        CHECKF(m->hp.n_embd == 96 && m->hp.head_dim == 48 && m->hp.rope_dim == 48, "%s: dim %d, head_dim %d, rope %d",
               hd_archs[a], m->hp.n_embd, m->hp.head_dim, m->hp.rope_dim);
        CHECKF(l->wq.rows == 5 * 48 && l->wq.cols == 96 && l->wk.rows == 48 && l->wv.rows == 48 && l->wo.rows == 96 &&
                   l->wo.cols == 5 * 48,
               "%s: wq %lldx%lld, wo %lldx%lld", hd_archs[a], (long long)l->wq.rows, (long long)l->wq.cols,
               (long long)l->wo.rows, (long long)l->wo.cols);
        kvt_model_free(m);
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
    bad.head_dim = 31; /* rope needs pairs */
    CHECK(kvt_mkmodel(&bad, kvt_test_path(kvt_test_tmpdir(), "bad.gguf")) == KVT_EARG && strstr(kvt_errmsg(), "even"));
    bad = kvt_mkmodel_default_params();
    bad.type = KVT_TYPE_Q8_0;
    bad.heads = 3;
    bad.kv_heads = 1;
    bad.head_dim = 48; /* q 144 wide: not in blocks of 32 */
    CHECK(kvt_mkmodel(&bad, kvt_test_path(kvt_test_tmpdir(), "bad.gguf")) == KVT_EARG &&
          strstr(kvt_errmsg(), "heads x head dim"));
    bad = kvt_mkmodel_default_params();
    bad.arch = "gpt2";
    CHECK(kvt_mkmodel(&bad, kvt_test_path(kvt_test_tmpdir(), "bad.gguf")) == KVT_EARG && strstr(kvt_errmsg(), "arch"));
    return kvt_test_done("test_mkmodel");
}
