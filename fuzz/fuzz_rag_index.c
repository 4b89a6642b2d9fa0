// SPDX-License-Identifier: MIT
/* Fuzz driver: the RAG index reader (rag.h) must reject any byte string
 * cleanly, and a file it accepts must answer queries (BM25, and with a
 * vector section, dense and hybrid). The driver rewrites
 * both CRC32Cs before parsing, so mutations reach the structure behind them
 * instead of stopping at a checksum. Built for libFuzzer with clang
 * (-DKVT_FUZZ=ON) and, in every build, as a replay test over
 * fuzz/corpus/rag_index plus deterministic mutations. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "rag.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void put_le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf = malloc(size ? size : 1);
    if (size) memcpy(buf, data, size);
    const size_t H = KVT_RAG_HEADER_BYTES;
    if (size >= H) {
        put_le32(buf + H - 8, kvt_crc32c(0, buf + H, size - H));
        put_le32(buf + H - 4, kvt_crc32c(0, buf, H - 4));
    }
    kvt_rag_index *x = NULL;
    if (!kvt_rag_parse(buf, size, "fuzz", &x)) {
        kvt_rag_hit hits[4];
        kvt_document docs[4];
        int32_t n = kvt_rag_query(x, "lyon warehouse refunds moon", 4, hits);
        kvt_rag_plan(x, KVT_RAG_ORDER_CANONICAL, hits, n, docs);
        volatile size_t sink = 0;
        for (int32_t i = 0; i < n; i++) sink += strlen(docs[i].id) + strlen(docs[i].text);
        for (int32_t i = 0; i < kvt_rag_n_chunks(x); i++) sink += kvt_rag_chunk_at(x, i)->tokens;
        int32_t dim = kvt_rag_vectors(x).dim;
        if (dim) {
            float *q = malloc((size_t)dim * sizeof *q);
            for (int32_t d = 0; d < dim; d++) q[d] = (float)(d % 3) - 1.0f;
            n = kvt_rag_query_hybrid(x, "lyon warehouse refunds moon", q, 4, KVT_RAG_RRF_K, hits);
            n += kvt_rag_query_dense(x, q, 4, hits);
            sink += (size_t)n + (kvt_rag_vector_at(x, kvt_rag_n_chunks(x) - 1)[dim - 1] > 0);
            free(q);
        }
        (void)sink;
        kvt_rag_free(x);
    }
    free(buf);
    return 0;
}
