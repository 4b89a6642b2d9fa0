// SPDX-License-Identifier: MIT
/* The GPU engine (Vulkan device 0, lavapipe here) on quantized mkmodel
 * llamas whose widths are multiples of 256, so the K types are used as
 * llama.cpp would use them: a Q4_K_M mix (Q4_K, with Q6_K for attn_v, some
 * ffn_down and the output), a Q2_K mix (Q2_K, with Q3_K for attn_v,
 * attn_output and ffn_down), pure Q4_0, IQ4_NL, IQ4_XS and BF16 (Q5_K, Q5_0, Q5_1
 * and Q4_1 are checked against the CPU's matmul in test_gpu_quant, Q4_1 also
 * in test_gpu_engine):
 *  - logits of every prompt position against the CPU engine: top-1 agreement
 *    and the largest |logit difference| (printed, bounded);
 *  - batch invariance: the last token's logits decoded alone, after a
 *    prefill of the others, are bit for bit its logits in one prefill of all.
 * Every matrix's type is printed once. No validation message may appear.
 * Skips (77) without a device. */
#include <math.h>
#include <string.h>

#include "engine.h"
#include "gpu_engine_test.h"
#include "mkmodel.h"
#include "model.h"

#define N_PROMPT 24
/* Both engines quantize activations the same way (Q8_K for the K types
 * and IQ4_XS, Q8_0 for Q4_0 and IQ4_NL, bf16 for BF16) and form each
 * block's term alike; the block terms are
 * summed in another order, so a value upstream may differ by an ulp, and one
 * near a rounding boundary then moves by a whole quantization step (1/127
 * of its block's largest value), which carries through the layers. As with
 * Q8_0 (test_gpu_engine) that is a few 1e-2 on these models' logits
 * (|logit| < 5; observed up to 0.08); 0.2 is the bound. Top-1 must agree
 * wherever the CPU's best logit leads the next by more than twice it. */
#define LOGIT_TOL 0.2

static kvt_engine *engine_on(const kvt_model *m, int32_t device) {
    kvt_engine_params ep = kvt_engine_default_params();
    ep.block_size = 16;
    ep.n_pages = 8;
    ep.n_ctx = 128;
    ep.n_threads = 2;
    ep.max_seqs = 2;
    ep.n_batch = 64;
    ep.device = device;
    kvt_engine *e = NULL;
    int rc = kvt_engine_new(m, ep, &e);
    CHECKF(rc == 0, "engine on %s: %s", device ? "vulkan:0" : "cpu", kvt_errmsg());
    return e;
}

/* Feeds p[0..n) to a fresh sequence in pieces of the given sizes; the logits
 * of every position into l (n * n_vocab). 0 or a failed check. */
static int feed(kvt_engine *e, const int32_t *p, int32_t n, const int32_t *pieces, float *l, int32_t n_vocab) {
    int32_t s, done = 0;
    int rc = kvt_seq_new(e, NULL, 0, 0, &s);
    for (int i = 0; !rc && done < n; i++) {
        rc = kvt_engine_feed(e, s, p + done, pieces[i], 1, l + (size_t)done * n_vocab);
        done += pieces[i];
    }
    CHECKF(rc == 0, "feed: %s", kvt_errmsg());
    if (!rc) kvt_seq_free(e, s);
    return rc;
}

static void print_types(const kvt_model *m, const char *name) {
    const kvt_layer *L = &m->layers[m->hp.n_layer - 1];
    printf("gpu engine quant: %s: last layer q %s k %s v %s o %s gate %s up %s down %s, output %s\n", name,
           kvt_ggml_type_name(L->wq.type), kvt_ggml_type_name(L->wk.type), kvt_ggml_type_name(L->wv.type),
           kvt_ggml_type_name(L->wo.type), kvt_ggml_type_name(L->w_gate.type), kvt_ggml_type_name(L->w_up.type),
           kvt_ggml_type_name(L->w_down.type), kvt_ggml_type_name(m->output.type));
}

/* Long: the model, two engines, every position compared, then the batch-invariance run. */
static void check_model(const char *name, uint32_t type, const char *mix) {
    kvt_mkmodel_params mp = kvt_mkmodel_default_params();
    mp.dim = 256;
    mp.layers = 2;
    mp.heads = 4;
    mp.kv_heads = 2;
    mp.ff = 512;
    mp.vocab = 512;
    mp.type = type;
    if (mix) {
        mp.mix = kvt_quant_mix_by_name(mix);
        mp.type = kvt_quant_mix_base(mp.mix);
    }
    char file[64];
    snprintf(file, sizeof file, "gpu_engine_%s.gguf", name);
    const char *path = kvt_test_path(kvt_test_tmpdir(), file);
    kvt_model *m = NULL;
    int rc = kvt_mkmodel(&mp, path);
    if (!rc) rc = kvt_model_load(path, kvt_model_default_params(), &m);
    CHECKF(rc == 0, "model %s: %s", name, kvt_errmsg());
    if (rc) return;
    print_types(m, name);
    int32_t nv = m->hp.n_vocab, p[N_PROMPT];
    unsigned seed = 11;
    kvt_test_random_tokens(p, N_PROMPT, nv, &seed);
    size_t nl = (size_t)N_PROMPT * nv;
    float *lc = malloc(nl * 4), *lg = malloc(nl * 4), *l1 = malloc(nl * 4);
    kvt_engine *ec = engine_on(m, 0), *eg = engine_on(m, 1);
    const int32_t whole[1] = {N_PROMPT}, split[2] = {N_PROMPT - 1, 1};
    if (ec && eg && !feed(ec, p, N_PROMPT, whole, lc, nv) && !feed(eg, p, N_PROMPT, whole, lg, nv)) {
        gpu_logit_cmp r = gpu_compare_logits(lc, lg, N_PROMPT, nv, LOGIT_TOL, name);
        printf("gpu engine quant: %s: top-1 agrees at %d/%d positions, max |dlogit| %.3g (logits up to %.3g, "
               "bound %g)\n",
               name, r.agree, N_PROMPT, r.dmax, r.lmax, LOGIT_TOL);
        if (!feed(eg, p, N_PROMPT, split, l1, nv))
            CHECKF(memcmp(l1 + (size_t)(N_PROMPT - 1) * nv, lg + (size_t)(N_PROMPT - 1) * nv, (size_t)nv * 4) == 0,
                   "%s: the last token decoded alone differs from its logits in the prefill", name);
    }
    kvt_engine_free(ec);
    kvt_engine_free(eg);
    kvt_model_free(m);
    free(lc);
    free(lg);
    free(l1);
}

int main(void) {
    kvt_test_gpu_variant();
    gpu_test_start();
    check_model("Q4_K_M", 0, "q4_k_m");
    check_model("Q4_0", KVT_TYPE_Q4_0, NULL);
    check_model("Q2_K", 0, "q2_k");
    check_model("IQ4_NL", KVT_TYPE_IQ4_NL, NULL);
    check_model("IQ4_XS", KVT_TYPE_IQ4_XS, NULL);
    check_model("BF16", KVT_TYPE_BF16, NULL);
    gpu_test_no_validation_messages(0);
    return kvt_test_done("test_gpu_engine_quant");
}
