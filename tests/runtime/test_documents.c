// SPDX-License-Identifier: MIT
/* Fixed context blocks: kvt_render_documents puts every document on
 * cache-block boundaries, the same documents in the same order after the
 * same prefix give a full-prefix hit whose greedy output is bit-identical to
 * a cold run over the rendered prompt, and the same documents in another
 * order miss exactly at the first document's block (reuse_stop: diverged);
 * two documents with one id are refused. */
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "generate.h"
#include "model.h"
#include "testutil.h"

#define B 16
#define N_GEN 8

static kvt_model *model;

static int32_t *tokenize(const char *text, size_t *n) {
    int32_t *ids = NULL;
    CHECKF(kvt_model_tokenize(model, text, strlen(text), 1, 0, &ids, n) == 0, "%s", kvt_errmsg());
    return ids;
}

static const kvt_document DA = {"a", "The warehouse in Lyon ships orders on Mondays and Thursdays only."};
static const kvt_document DB = {"b", "Refunds go back to the original card within five business days."};

/* prompt text with docs inserted after BOS, as the server and `run -f` do */
static int32_t *render(const char *question, const kvt_document *docs, size_t n_docs, size_t *n) {
    size_t nq;
    int32_t *q = tokenize(question, &nq), *out = NULL;
    size_t at = nq && q[0] == kvt_tokenizer_bos(model->tok) ? 1 : 0;
    CHECKF(kvt_render_documents(model, B, q, nq, at, docs, n_docs, &out, n) == 0, "%s", kvt_errmsg());
    free(q);
    return out;
}

static void test_layout(void) {
    kvt_document ab[2] = {DA, DB};
    size_t n_ab, n_a, nq;
    int32_t *q = tokenize("Question?", &nq);
    int32_t *p_ab = render("Question?", ab, 2, &n_ab), *p_a = render("Question?", ab, 1, &n_a);
    int32_t pad = kvt_document_pad_token(model);
    CHECK(pad >= 0);
    /* [BOS pad...][A pad...][B pad...][question]: the question starts on a boundary */
    CHECK((n_ab - (nq - 1)) % B == 0 && (n_a - (nq - 1)) % B == 0);
    CHECK(n_a < n_ab);
    /* A's blocks are the same with or without B after it */
    CHECK(!memcmp(p_a, p_ab, (n_a - (nq - 1)) * sizeof *p_a));
    CHECK(p_ab[1] == pad && p_ab[B - 1] == pad && p_ab[B] != pad); /* BOS padded to a block, then A */
    int32_t *none = NULL;
    size_t n_none;
    CHECK(kvt_render_documents(model, B, q, nq, 0, NULL, 0, &none, &n_none) == 0 && n_none == nq);
    free(none);
    CHECK(kvt_render_documents(model, B, q, nq, nq + 1, ab, 2, &none, &n_none) == KVT_EARG);
    free(none);
    /* an id names one document, as in the server's kvtier.documents: the same id twice is refused */
    kvt_document twice[3] = {DA, DB, {"a", "Another text under the first document's id."}};
    CHECK(kvt_render_documents(model, B, q, nq, 1, twice, 3, &none, &n_none) == KVT_EARG && !none && !n_none);
    CHECKF(strstr(kvt_errmsg(), "document 2's id 'a' repeats the id of document 0"), "%s", kvt_errmsg());
    free(none);
    free(q);
    free(p_ab);
    free(p_a);
}

static void test_reuse(void) {
    kvt_engine *e = kvt_test_engine(model, B, 256, 1024);
    kvt_cache *c = e ? kvt_test_cache(e, NULL, 0) : NULL;
    if (!c) goto out;
    kvt_document ab[2] = {DA, DB}, ba[2] = {DB, DA};
    size_t n1, n2, n3;
    int32_t *p1 = render("When will my order ship?", ab, 2, &n1);
    int32_t *p2 = render("Where does my refund go?", ab, 2, &n2);
    int32_t *p3 = render("When will my order ship?", ba, 2, &n3);
    size_t q1;
    int32_t *q = tokenize("When will my order ship?", &q1);
    int32_t docs_end = (int32_t)(n1 - (q1 - 1)); /* BOS block + both documents */
    free(q);

    kvt_test_gen g1 = kvt_test_generate(e, c, p1, (int32_t)n1, N_GEN, NULL);
    /* same documents, same order, another question: every document block is reused */
    kvt_test_gen g2 = kvt_test_generate(e, c, p2, (int32_t)n2, N_GEN, NULL);
    CHECKF(g2.res.n_reused >= docs_end, "reused %d of %d document tokens", g2.res.n_reused, docs_end);
    CHECKF(g2.res.reuse_stop.block >= docs_end / B, "stop at block %d", g2.res.reuse_stop.block);
    kvt_engine *ec = kvt_test_engine(model, B, 256, 1024);
    kvt_test_gen cold = kvt_test_generate(ec, NULL, p2, (int32_t)n2, N_GEN, NULL);
    CHECKF(kvt_test_same(&g2, &cold), "warm output over the rendered prompt differs from a cold run");
    /* the same prompt again: a full-prefix hit */
    kvt_test_gen g1b = kvt_test_generate(e, c, p1, (int32_t)n1, N_GEN, NULL);
    CHECK(g1b.res.reuse_stop.reason == KVT_REUSE_END_OF_PROMPT && g1b.res.n_reused >= ((int32_t)n1 - 1) / B * B);
    CHECK(kvt_test_same(&g1, &g1b));
    /* B, A after A, B: reuse stops at the first document's block, where the texts differ */
    kvt_test_gen g3 = kvt_test_generate(e, c, p3, (int32_t)n3, N_GEN, NULL);
    const kvt_reuse_stop *s = &g3.res.reuse_stop;
    CHECKF(s->reason == KVT_REUSE_DIVERGED && s->block == 1, "got %s@block %d", kvt_reuse_reason_name(s->reason),
           s->block);
    CHECKF(s->token_offset > B && s->token_offset < 2 * B && g3.res.n_reused == B, "offset %d, reused %d",
           s->token_offset, g3.res.n_reused);
    kvt_test_gen_free(&g1);
    kvt_test_gen_free(&g2);
    kvt_test_gen_free(&g1b);
    kvt_test_gen_free(&g3);
    kvt_test_gen_free(&cold);
    kvt_engine_free(ec);
    free(p1);
    free(p2);
    free(p3);
out:
    kvt_cache_free(c);
    kvt_engine_free(e);
}

int main(void) {
    model = kvt_test_tiny_model("docs.gguf", 2048);
    if (!model) return 1;
    test_layout();
    test_reuse();
    kvt_model_free(model);
    return kvt_test_done("test_documents");
}
