// SPDX-License-Identifier: MIT
/* The engine's final hidden state rows (kvt_batch.want_hidden): each is the
 * row the output matrix turns into that token's logits, so output x hidden
 * reproduces the logits the same decode wrote; they come out in batch order,
 * the same whether asked for with or without logits, and are bit-identical
 * when the prefix was computed in another call. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "engine.h"
#include "model.h"
#include "ops.h"
#include "testutil.h"

#define N_TOK 12

static void test_model(const char *name) {
    kvt_model *m = NULL;
    const char *dir = kvt_test_path(kvt_test_shared(), "models");
    int rc = kvt_model_load(kvt_test_path(dir, name), kvt_model_default_params(), &m);
    CHECKF(rc == 0, "load %s: %s", name, kvt_errmsg());
    if (rc) return;
    kvt_engine_params p = kvt_engine_default_params();
    p.n_threads = 2;
    p.n_batch = 5; /* several chunks */
    p.block_size = 4;
    p.n_pages = 32;
    p.max_seqs = 2;
    kvt_engine *e = NULL;
    CHECKF(kvt_engine_new(m, p, &e) == 0, "engine: %s", kvt_errmsg());
    const int64_t D = m->hp.n_embd, V = m->hp.n_vocab;
    int32_t toks[N_TOK], seqs[N_TOK];
    int8_t want[N_TOK];
    for (int i = 0; i < N_TOK; i++) toks[i] = (int32_t)((i * 37 + 5) % V), want[i] = 1;
    float *hid = kvt_xmalloc((size_t)(N_TOK * D) * sizeof(float));
    float *logits = kvt_xmalloc((size_t)(N_TOK * V) * sizeof(float));
    int32_t seq;
    CHECK(kvt_seq_new(e, NULL, 0, 0, &seq) == 0);
    for (int i = 0; i < N_TOK; i++) seqs[i] = seq;
    kvt_batch b = {.n = N_TOK, .token = toks, .seq = seqs, .want_logits = want, .want_hidden = want, .hidden = hid};
    CHECKF(kvt_engine_decode(e, &b, logits) == 0, "decode: %s", kvt_errmsg());

    /* logits == output matrix x hidden row, within the summation order's rounding */
    float *row = kvt_xmalloc((size_t)D * sizeof(float));
    double worst = 0;
    for (int64_t v = 0; v < V; v++) {
        kvt_wmat_row_f32(&m->output, v, row);
        for (int t = 0; t < N_TOK; t++) {
            double dot = 0;
            for (int64_t k = 0; k < D; k++) dot += (double)row[k] * hid[t * D + k];
            if (m->hp.final_softcap > 0) dot = m->hp.final_softcap * tanh(dot / m->hp.final_softcap);
            double d = fabs(dot - logits[t * V + v]) / (1.0 + fabs(dot));
            if (d > worst) worst = d;
        }
    }
    CHECKF(worst < 2e-3, "%s: logits vs output x hidden: relative error %g", name, worst);

    /* only the last two rows, no logits, the prefix in an earlier call: the same bits */
    int32_t seq2;
    CHECK(kvt_seq_new(e, NULL, 0, 0, &seq2) == 0);
    CHECK(kvt_engine_feed(e, seq2, toks, N_TOK - 2, 0, NULL) == 0);
    float hid2[2 * 4096];
    CHECK(D <= 4096);
    int8_t want2[2] = {1, 1};
    int32_t seqs2[2] = {seq2, seq2};
    kvt_batch b2 =
        {.n = 2, .token = toks + N_TOK - 2, .seq = seqs2, .want_logits = NULL, .want_hidden = want2, .hidden = hid2};
    float *last = kvt_xmalloc((size_t)V * sizeof(float));
    CHECKF(kvt_engine_decode(e, &b2, last) == 0, "decode: %s", kvt_errmsg());
    CHECKF(!memcmp(hid2, hid + (N_TOK - 2) * D, (size_t)(2 * D) * sizeof(float)),
           "%s: hidden rows differ when the prefix was fed before", name);

    /* wanted rows but no buffer: refused before anything is computed */
    int32_t len = kvt_seq_len(e, seq2);
    kvt_batch bad = {.n = 1, .token = toks, .seq = seqs2, .want_logits = NULL, .want_hidden = want2, .hidden = NULL};
    CHECK(kvt_engine_decode(e, &bad, last) == KVT_EARG);
    CHECK(kvt_seq_len(e, seq2) == len);

    free(last), free(row), free(hid), free(logits);
    kvt_engine_free(e);
    kvt_model_free(m);
}

int main(void) {
    char *probe = kvt_test_read_file(kvt_test_path(kvt_test_path(kvt_test_shared(), "models"), "tiny-llama-f32.gguf"),
                                     NULL);
    if (!probe) kvt_test_skip("no ../shared/models (set KVT_SHARED): the hidden-state checks did not run");
    free(probe);
    test_model("tiny-llama-f32.gguf");
    test_model("tiny-qwen2-f16.gguf");
    return kvt_test_done("test_hidden");
}
