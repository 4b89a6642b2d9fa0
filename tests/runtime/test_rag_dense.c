// SPDX-License-Identifier: MIT
/* Dense vectors in the RAG index (rag.h "dense vectors and hybrid
 * retrieval"): an index with a vector per chunk round-trips through its file
 * bit for bit and as version 3, one without stays version 2 and the version 2
 * files of earlier kvtier still load; hybrid ranking equals reciprocal rank
 * fusion computed here by hand; a question embedded with another model or
 * pooling is refused naming both; a short, extended or non-finite vector
 * section is refused naming the vector section; the embedder's vectors are
 * unit length and the same for the same text. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "crc32c.h"
#include "mkmodel.h"
#include "model.h"
#include "rag.h"
#include "testutil.h"
#include "tokenizer.h"

#define B 16
#define CHUNK 64
#define DIM 3

static kvt_model *model;

static const char *const DOCS[][2] = {
    {"lyon", "The warehouse in Lyon ships parcels on Mondays and Thursdays only."},
    {"refunds", "Refunds go back to the original card within five business days."},
    {"etna", "Mount Etna in Sicily erupts several times a year."},
    {"tides", "Ocean tides rise and fall twice a day because the moon pulls on the water."},
    {"bees", "A worker bee lives about six weeks in summer; the warehouse of the hive is wax."},
};

static kvt_rag_index *build(void) {
    kvt_rag_builder *b = NULL;
    CHECKF(kvt_rag_build_new(model, B, CHUNK, &b) == 0, "%s", kvt_errmsg());
    if (!b) return NULL;
    for (size_t i = 0; i < KVT_ARRAY_LEN(DOCS); i++)
        CHECKF(kvt_rag_build_add(b, DOCS[i][0], DOCS[i][1], strlen(DOCS[i][1])) == 0, "%s", kvt_errmsg());
    kvt_rag_index *x = NULL;
    CHECKF(kvt_rag_build_finish(b, &x) == 0, "%s", kvt_errmsg());
    return x;
}

static void put_le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Rewrites the payload length and both checksums, so only the structure is wrong. */
static void reseal(uint8_t *p, size_t len) {
    const size_t H = KVT_RAG_HEADER_BYTES;
    uint64_t pl = len - H;
    put_le32(p + 28, (uint32_t)pl);
    put_le32(p + 32, (uint32_t)(pl >> 32));
    put_le32(p + H - 8, kvt_crc32c(0, p + H, len - H));
    put_le32(p + H - 4, kvt_crc32c(0, p, H - 4));
}

/* Hand-made unit-ish vectors per chunk, so the dense ranking is known. */
static void fixture_vectors(kvt_rag_index *x, float *v) {
    int32_t n = kvt_rag_n_chunks(x);
    for (int32_t i = 0; i < n; i++) {
        v[i * DIM + 0] = (float)(i + 1);
        v[i * DIM + 1] = (float)(n - i);
        v[i * DIM + 2] = (float)((i * 7) % 3);
    }
    kvt_rag_set_vectors(x, v, DIM, model, KVT_RAG_POOL_MEAN);
}

static void test_round_trip(kvt_rag_index *x) {
    const char *dir = kvt_test_tmpdir(), *path = kvt_test_path(dir, "v.idx");
    CHECKF(kvt_rag_save(x, path) == 0, "%s", kvt_errmsg());
    size_t len;
    uint8_t *bytes = (uint8_t *)kvt_test_read_file(path, &len);
    if (!bytes) return;
    CHECK(bytes[8] == KVT_RAG_VERSION_DENSE);
    kvt_rag_index *y = NULL;
    CHECKF(kvt_rag_load(path, &y) == 0, "%s", kvt_errmsg());
    if (y) {
        kvt_rag_vec_info a = kvt_rag_vectors(x), b = kvt_rag_vectors(y);
        CHECK(b.dim == DIM && b.pooling == KVT_RAG_POOL_MEAN && !strcmp(a.model, b.model));
        CHECK(!memcmp(&a.fingerprint, &b.fingerprint, sizeof a.fingerprint));
        for (int32_t i = 0; i < kvt_rag_n_chunks(x); i++)
            CHECK(!memcmp(kvt_rag_vector_at(x, i), kvt_rag_vector_at(y, i), DIM * sizeof(float)));
        CHECK(kvt_rag_vector_at(y, kvt_rag_n_chunks(y)) == NULL);
        kvt_rag_free(y);
    }
    /* the vector section damaged behind valid checksums: refused, naming it */
    const size_t vec_bytes = (size_t)kvt_rag_n_chunks(x) * DIM * 4;
    struct {
        size_t cut; /* bytes removed from the end */
        const char *want;
    } cases[] = {{4, "vector section holds"}, {vec_bytes, "vector section holds"}, {vec_bytes + 10, "vector section"}};
    for (size_t c = 0; c < KVT_ARRAY_LEN(cases); c++) {
        uint8_t *p = malloc(len);
        memcpy(p, bytes, len);
        size_t n = len - cases[c].cut;
        reseal(p, n);
        CHECKF(kvt_rag_parse(p, n, "cut", &y) == KVT_EFORMAT && !y && strstr(kvt_errmsg(), cases[c].want),
               "cut %zu: %s", cases[c].cut, kvt_errmsg());
        free(p);
    }
    uint8_t *p = malloc(len + 4);
    memcpy(p, bytes, len);
    memset(p + len, 0, 4); /* one float too many */
    reseal(p, len + 4);
    CHECKF(kvt_rag_parse(p, len + 4, "long", &y) == KVT_EFORMAT && strstr(kvt_errmsg(), "extended"), "%s", kvt_errmsg());
    memcpy(p, bytes, len);
    uint32_t nan_bits = 0x7fc00000u;
    put_le32(p + len - 4, nan_bits); /* the last chunk's last float */
    reseal(p, len);
    CHECKF(kvt_rag_parse(p, len, "nan", &y) == KVT_EFORMAT && strstr(kvt_errmsg(), "finite"), "%s", kvt_errmsg());
    memcpy(p, bytes, len);
    put_le32(p + len - vec_bytes - 4 - strlen(kvt_rag_vectors(x).model) - 16 - 4, 9); /* pooling 9 */
    reseal(p, len);
    CHECKF(kvt_rag_parse(p, len, "pool", &y) == KVT_EFORMAT && strstr(kvt_errmsg(), "pooling 9"), "%s", kvt_errmsg());
    free(p);
    free(bytes);
}

/* Version 2: an index without vectors is still written as one, and the
 * version 2 files kept in the fuzz corpus load. */
static void test_old_versions(void) {
    kvt_rag_index *x = build();
    if (!x) return;
    const char *path = kvt_test_path(kvt_test_tmpdir(), "plain.idx");
    CHECK(kvt_rag_save(x, path) == 0);
    size_t len;
    char *bytes = kvt_test_read_file(path, &len);
    CHECK(bytes && bytes[8] == KVT_RAG_VERSION && kvt_rag_vectors(x).dim == 0);
    free(bytes);
    kvt_rag_free(x);
    const char *src = getenv("KVT_SRC");
    char old[4096];
    snprintf(old, sizeof old, "%s/fuzz/corpus/rag_index/six-docs.idx", src ? src : ".");
    kvt_rag_index *y = NULL;
    CHECKF(kvt_rag_load(old, &y) == 0, "%s: %s", old, kvt_errmsg());
    if (!y) return;
    CHECK(kvt_rag_n_chunks(y) > 0 && kvt_rag_vectors(y).dim == 0);
    kvt_rag_hit h[4];
    CHECK(kvt_rag_query(y, "warehouse", 4, h) >= 0);
    CHECK(kvt_rag_query_dense(y, (const float[]){1, 0, 0}, 4, h) == 0);
    CHECK(kvt_rag_check_embedder(y, model, KVT_RAG_POOL_MEAN) == KVT_EARG && strstr(kvt_errmsg(), "--embed"));
    kvt_rag_free(y);
}

/* Ranks from 1 of chunk c in hits[0..n), 0 when absent. */
static int32_t rank_of(const kvt_rag_hit *hits, int32_t n, int32_t c) {
    for (int32_t i = 0; i < n; i++)
        if (hits[i].chunk == c) return i + 1;
    return 0;
}

static void test_hybrid(kvt_rag_index *x, int32_t rrf_k) {
    int32_t n = kvt_rag_n_chunks(x);
    const char *q = "warehouse parcels";
    const float qv[DIM] = {1, 0.2f, 0};
    kvt_rag_hit lex[KVT_RAG_MAX_K], dense[KVT_RAG_MAX_K], hyb[KVT_RAG_MAX_K];
    int32_t n_lex = kvt_rag_query(x, q, KVT_RAG_MAX_K, lex), n_dense = kvt_rag_query_dense(x, qv, KVT_RAG_MAX_K, dense);
    CHECKF(n_lex >= 2 && n_lex < n, "the fixture's question should hit some chunks, not all: %d of %d", n_lex, n);
    CHECK(n_dense == n);
    /* the dense ranking by hand: cosine, best first */
    for (int32_t i = 0; i + 1 < n_dense; i++) CHECK(dense[i].score >= dense[i + 1].score);
    for (int32_t i = 0; i < n_dense; i++) {
        const float *v = kvt_rag_vector_at(x, dense[i].chunk);
        double dot = 0, a = 0, b = 0;
        for (int d = 0; d < DIM; d++) dot += (double)qv[d] * v[d], a += (double)qv[d] * qv[d], b += (double)v[d] * v[d];
        CHECK(fabs(dense[i].score - dot / sqrt(a * b)) < 1e-12);
    }
    /* fused by hand: 1 / (k + rank) from each list the chunk is in */
    double want[64] = {0};
    for (int32_t c = 0; c < n; c++) {
        int32_t rl = rank_of(lex, n_lex, c), rd = rank_of(dense, n_dense, c);
        want[c] = (rl ? 1.0 / (rrf_k + rl) : 0) + (rd ? 1.0 / (rrf_k + rd) : 0);
    }
    int32_t got = kvt_rag_query_hybrid(x, q, qv, KVT_RAG_MAX_K, rrf_k, hyb);
    CHECK(got == n);
    for (int32_t i = 0; i < got; i++) {
        CHECKF(fabs(hyb[i].score - want[hyb[i].chunk]) < 1e-12, "k %d rank %d: %g, by hand %g", rrf_k, i, hyb[i].score,
               want[hyb[i].chunk]);
        CHECK(hyb[i].rank == i);
        if (i) {
            CHECK(hyb[i - 1].score >= hyb[i].score);
            if (hyb[i - 1].score == hyb[i].score)
                CHECK(strcmp(kvt_rag_chunk_at(x, hyb[i - 1].chunk)->id, kvt_rag_chunk_at(x, hyb[i].chunk)->id) < 0);
        }
    }
    /* the mode switch gives the same, and k cuts the list */
    kvt_rag_hit two[2];
    CHECK(kvt_rag_retrieve_k(x, KVT_RAG_RETRIEVE_HYBRID, q, qv, 2, rrf_k, two) == 2);
    CHECK(two[0].chunk == hyb[0].chunk && two[1].chunk == hyb[1].chunk);
    CHECK(kvt_rag_retrieve_k(x, KVT_RAG_RETRIEVE_BM25, q, NULL, 2, rrf_k, two) == 2 && two[0].chunk == lex[0].chunk);
}

/* An index embedded by the embedder: its vectors are the embedder's for each
 * chunk's text, and a question is refused with another model or pooling. */
static void test_embedded(void) {
    kvt_rag_index *x = build();
    kvt_rag_embedder *e = NULL;
    CHECKF(kvt_rag_embedder_new(model, KVT_RAG_POOL_MEAN, 2, &e) == 0, "%s", kvt_errmsg());
    if (!x || !e) return;
    int32_t n = kvt_rag_n_chunks(x), d = kvt_rag_embedder_dim(e);
    float *v = malloc((size_t)n * (size_t)d * sizeof *v);
    for (int32_t i = 0; i < n; i++) {
        const char *t = kvt_rag_chunk_at(x, i)->text;
        CHECK(kvt_rag_embed(e, t, strlen(t), v + (size_t)i * (size_t)d) == 0);
    }
    kvt_rag_set_vectors(x, v, d, model, KVT_RAG_POOL_MEAN);
    const char *path = kvt_test_path(kvt_test_tmpdir(), "embedded.idx");
    CHECK(kvt_rag_save(x, path) == 0);
    kvt_rag_index *y = NULL;
    CHECKF(kvt_rag_load(path, &y) == 0, "%s", kvt_errmsg());
    for (int32_t i = 0; y && i < n; i++)
        CHECK(!memcmp(kvt_rag_vector_at(y, i), v + (size_t)i * (size_t)d, (size_t)d * sizeof *v));
    /* a chunk's own text, asked as the question, is its own nearest chunk */
    kvt_rag_hit h[1];
    const char *t = kvt_rag_chunk_at(x, 2)->text;
    float *q = malloc((size_t)d * sizeof *q);
    CHECK(kvt_rag_embed(e, t, strlen(t), q) == 0);
    CHECK(kvt_rag_query_dense(y ? y : x, q, 1, h) == 1 && h[0].chunk == 2 && fabs(h[0].score - 1) < 1e-6);
    free(q);

    CHECKF(kvt_rag_check_embedder(y ? y : x, model, KVT_RAG_POOL_MEAN) == 0, "%s", kvt_errmsg());
    CHECK(kvt_rag_check_embedder(x, model, KVT_RAG_POOL_LAST) == KVT_EARG);
    CHECKF(strstr(kvt_errmsg(), "pooled by mean") && strstr(kvt_errmsg(), "pooled by last"), "%s", kvt_errmsg());
    kvt_mkmodel_params mp = kvt_test_tiny_params();
    mp.vocab = 2048;
    mp.seed += 1;
    const char *other_path = kvt_test_path(kvt_test_tmpdir(), "other.gguf");
    kvt_model *other = NULL;
    CHECK(kvt_mkmodel(&mp, other_path) == 0 && kvt_model_load(other_path, kvt_model_default_params(), &other) == 0);
    if (other) {
        CHECK(kvt_rag_check_embedder(x, other, KVT_RAG_POOL_MEAN) == KVT_EARG);
        CHECKF(strstr(kvt_errmsg(), "dense.gguf") && strstr(kvt_errmsg(), "other.gguf"), "%s", kvt_errmsg());
        kvt_model_free(other);
    }
    free(v);
    kvt_rag_embedder_free(e);
    kvt_rag_free(y);
    kvt_rag_free(x);
}

/* The embedder: unit vectors of n_embd floats, the same bits for the same text. */
static void test_embedder(void) {
    for (int p = KVT_RAG_POOL_MEAN; p <= KVT_RAG_POOL_CLS; p++) {
        kvt_rag_embedder *e = NULL;
        CHECKF(kvt_rag_embedder_new(model, (kvt_rag_pooling)p, 2, &e) == 0, "%s", kvt_errmsg());
        if (!e) return;
        int32_t d = kvt_rag_embedder_dim(e);
        CHECK(d == model->hp.n_embd);
        float *a = malloc((size_t)d * sizeof *a), *b = malloc((size_t)d * sizeof *b);
        const char *t = "Ocean tides rise and fall twice a day.";
        CHECK(kvt_rag_embed(e, t, strlen(t), a) == 0 && kvt_rag_embed(e, t, strlen(t), b) == 0);
        CHECK(!memcmp(a, b, (size_t)d * sizeof *a));
        double norm = 0;
        for (int32_t i = 0; i < d; i++) norm += (double)a[i] * a[i];
        CHECKF(fabs(norm - 1) < 1e-5, "%s pooling: norm^2 %g", kvt_rag_pooling_name(p), norm);
        CHECK(kvt_rag_embed(e, "", 0, a) == (kvt_tokenizer_add_special(model->tok) ? 0 : KVT_EARG));
        free(a), free(b);
        kvt_rag_embedder_free(e);
    }
}

int main(void) {
    model = kvt_test_tiny_model("dense.gguf", 2048);
    if (!model) return 1;
    test_embedder();
    test_old_versions();
    kvt_rag_index *x = build();
    if (x) {
        CHECK(kvt_rag_n_chunks(x) <= 64);
        float v[64 * DIM];
        fixture_vectors(x, v);
        test_round_trip(x);
        test_hybrid(x, KVT_RAG_RRF_K);
        test_hybrid(x, 1);
        test_embedded();
    }
    kvt_rag_free(x);
    kvt_model_free(model);
    return kvt_test_done("test_rag_dense");
}
