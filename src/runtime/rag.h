// SPDX-License-Identifier: MIT
/* Cache-aware RAG: a corpus cut into fixed context blocks (chunks), a BM25
 * index over them in one file, retrieval, and the planner that turns the
 * retrieved chunks into a stable prefix (docs/rag.md).
 *
 * Chunks. Each document is split at paragraph breaks (then sentences, then
 * words, then bytes for a run with no break) into chunks whose rendering as a
 * fixed context block ("Document <id>:\n<text>\n", kvt_render_documents)
 * takes at most chunk_tokens tokens, chunk_tokens a multiple of the cache
 * block B. So a chunk is always a whole run of blocks of its own: after the
 * same prefix its KV blocks are the same whatever question retrieved it.
 *
 * Ids. A chunk's id is "<doc>#<hex>": its document's name and the first
 * KVT_RAG_ID_HEX hex digits of XXH3-64 over its text. It depends on nothing
 * else, so re-indexing the same text gives the same id (and the same rendered
 * tokens, so the same KV blocks), and adding, removing or editing other
 * documents or paragraphs changes no other chunk's id. Canonical order is by
 * id, so it survives corpus changes too. When an earlier chunk already has
 * the id (the same text repeated under one document name, or a 32-bit hash
 * collision), the hash is re-seeded with 1, 2, ... until the id is new: a
 * repeat's id then depends on the repeats before it. The file stores the ids.
 *
 * Index file (little-endian, written to a temporary file, fsync'd, renamed):
 *   header  magic "KVTRAGIX", u32 version, u32 block_size, u32 chunk_tokens,
 *           u32 n_chunks, u32 n_terms, u64 payload bytes, u32 payload CRC32C,
 *           u32 header CRC32C (over the fields before it)
 *   payload per chunk: u32 doc length, doc, u32 seq, u32 tokens (rendered, padded),
 *           u32 terms (its BM25 length), u32 text length, text;
 *           then per term, sorted by bytes: u32 length, term, u32 df,
 *           df x (u32 chunk, u32 term frequency) with chunks ascending;
 *           version 3 only, the vector section: u32 dim, u32 pooling (1 mean,
 *           2 last, 3 cls), u64 fingerprint lo, u64 fingerprint hi, u32 model
 *           name length, model name, then n_chunks x dim f32, chunk by chunk.
 *           An index without vectors is written as version 2, byte for byte
 *           what earlier kvtier wrote; both versions load.
 * Every count and length is checked against the bytes left; a file that is
 * short, altered or of another version is refused with a message naming the
 * problem, never half-loaded. The magic is checked first, then the version,
 * then the checksums, so a file of another version is named as such.
 *
 * BM25: terms are runs of ASCII letters and digits (lower-cased) and of
 * non-ASCII bytes, minus a short English stop list; score = sum over the
 * question's distinct terms of idf * tf (k1 + 1) / (tf + k1 (1 - b + b len /
 * avg len)), idf = ln(1 + (N - df + 0.5) / (df + 0.5)), k1 1.2, b 0.75.
 * Ties rank the lower id first.
 *
 * Thread-safety: an index is immutable once built or loaded; queries on it
 * are reentrant. */
#ifndef KVT_RAG_H
#define KVT_RAG_H

#include <stddef.h>
#include <stdint.h>

#include "hash128.h"
#include "kvtier.h"

#define KVT_RAG_VERSION 2       /* 2: content-derived ids (chunk token counts measured with them) */
#define KVT_RAG_VERSION_DENSE 3 /* 3: version 2 plus a dense vector per chunk (the vector section) */
#define KVT_RAG_ID_HEX 8        /* hex digits of a chunk id's content hash (32 bits: few tokens per chunk) */
#define KVT_RAG_DEFAULT_CHUNK_TOKENS 256
#define KVT_RAG_DEFAULT_K 4
#define KVT_RAG_MAX_K 64
#define KVT_RAG_MAX_FILE (1ull << 32) /* bytes of an index file at most */
#define KVT_RAG_DOC_MAX 200           /* bytes of a document name kept (ids stay under 256) */
#define KVT_RAG_K1 1.2
#define KVT_RAG_B 0.75
#define KVT_RAG_DIM_MAX 65536      /* floats of a dense vector at most */
#define KVT_RAG_MODEL_NAME_MAX 255 /* bytes of the embedding model's name kept */
#define KVT_RAG_RRF_K 60           /* reciprocal rank fusion's constant (hybrid retrieval) */
#define KVT_RAG_HEADER_BYTES 44    /* the header; its CRC32C is its last 4 bytes, the payload's the 4 before */

typedef struct kvt_rag_index kvt_rag_index;

/* One chunk as the index holds it. Strings owned by the index. */
typedef struct {
    const char *doc; /* the document's name (file name or JSONL "id") */
    uint32_t seq;    /* its position in the document, from 0 */
    const char *id;  /* "<doc>#<hex>" (above, "Ids"): the id it is rendered with */
    const char *text;
    uint32_t tokens;  /* tokens of its rendering, padded to whole blocks */
    uint32_t n_terms; /* BM25 length */
} kvt_rag_chunk;

/* A builder: documents in, chunks and postings out. tokenizer_model is
 * borrowed until kvt_rag_build_finish (vocab-only is enough). */
typedef struct kvt_rag_builder kvt_rag_builder;

/* block_size B >= 1; chunk_tokens a multiple of B, at least 2B. KVT_EARG else. */
int kvt_rag_build_new(const kvt_model *tokenizer_model, int32_t block_size, int32_t chunk_tokens, kvt_rag_builder **out);
/* Splits one document into chunks and indexes them (doc is truncated to
 * KVT_RAG_DOC_MAX bytes). An empty text adds nothing. 0 or a negative code. */
int kvt_rag_build_add(kvt_rag_builder *b, const char *doc, const char *text, size_t len);
/* Chunks so far. */
int32_t kvt_rag_build_chunks(const kvt_rag_builder *b);
/* Turns the builder (freed) into an index. KVT_EARG when it holds no chunk. */
int kvt_rag_build_finish(kvt_rag_builder *b, kvt_rag_index **out);
void kvt_rag_build_free(kvt_rag_builder *b);

/* Writes idx to path atomically (temp file, fsync, rename). 0 or -errno. */
int kvt_rag_save(const kvt_rag_index *idx, const char *path);
/* Reads and validates an index file (opened without following a symlink).
 * KVT_EFORMAT with the reason ("bad magic", "checksum mismatch", ...),
 * KVT_EUNSUPPORTED for another version, -errno for I/O. */
int kvt_rag_load(const char *path, kvt_rag_index **out);
/* kvt_rag_load's checks over an index already in memory (buf[0..len),
 * borrowed); name is used in messages. */
int kvt_rag_parse(const void *buf, size_t len, const char *name, kvt_rag_index **out);
void kvt_rag_free(kvt_rag_index *idx);

int32_t kvt_rag_n_chunks(const kvt_rag_index *idx);
int32_t kvt_rag_n_terms(const kvt_rag_index *idx);
int32_t kvt_rag_block_size(const kvt_rag_index *idx);
int32_t kvt_rag_chunk_tokens(const kvt_rag_index *idx);
/* Chunk i (0 <= i < n_chunks), valid until kvt_rag_free. */
const kvt_rag_chunk *kvt_rag_chunk_at(const kvt_rag_index *idx, int32_t i);

/* A retrieved chunk: its number in the index and BM25 score. */
typedef struct {
    int32_t chunk;
    double score;
    int32_t rank; /* 0 = best score */
} kvt_rag_hit;

/* The k best chunks for question (score > 0 only), best first. Writes at
 * most k hits into out and returns how many. */
int32_t kvt_rag_query(const kvt_rag_index *idx, const char *question, int32_t k, kvt_rag_hit *out);

/* How the retrieved chunks are ordered in the prompt. */
typedef enum {
    KVT_RAG_ORDER_CACHED = 0,    /* walk the cache's prefix index, then canonical (the default; kvt_rag_plan_cached) */
    KVT_RAG_ORDER_CANONICAL = 1, /* by id: the same set is always the same bytes, whatever the corpus around it */
    KVT_RAG_ORDER_SCORE = 2,     /* best first, as naive RAG does: reuse stops at the first moved chunk */
} kvt_rag_order;

/* "cached" / "canonical" / "score"; parse returns -1 for another name. */
const char *kvt_rag_order_name(kvt_rag_order o);
int kvt_rag_order_parse(const char *s);

/* The planner: orders hits[0..n) in place for mode, and fills docs[0..n)
 * (borrowing the index's strings) to be rendered as fixed context blocks
 * before the question (kvt_render_documents), so the prompt reads
 * [system][chunks in plan order][question]. */
void kvt_rag_plan(const kvt_rag_index *idx, kvt_rag_order mode, kvt_rag_hit *hits, int32_t n, kvt_document *docs);

/* The cache-aware step of KVT_RAG_ORDER_CACHED, run where the cache is (the
 * engine thread) just before the request starts. prompt[0..n) holds n_docs
 * documents rendered as fixed context blocks in canonical order, document i
 * at [starts[i], starts[i+1]) (kvt_render_documents_spans). Greedily, at
 * each depth, among the documents not placed yet, it takes the one whose
 * continuation (it, then the rest in canonical order) has the longest cached
 * prefix under root, the earliest in canonical order on a tie; once no
 * candidate's first block is cached, the rest stay in canonical order. The
 * documents are permuted in place (every rendering is whole blocks, so the
 * prompt keeps its length and the question its place), starts is updated,
 * and order[i] receives the canonical index of the document now at position
 * i. Cost: at most n_docs^2 / 2 lookups, each hashing the prompt up to the
 * last document (docs/rag.md "Orders and the planner" has the measurement). Returns the lookups made. */
int32_t kvt_rag_plan_cached(kvt_cache *c, kvt_hash128 root, int32_t *prompt, int32_t n, size_t *starts, size_t n_docs,
                            int32_t *order);

/* ---- dense vectors and hybrid retrieval (rag_dense.c) -------------------------------------
 * `rag index --embed` stores one vector per chunk beside the BM25 postings:
 * the chunk's text run through a model, its final hidden rows pooled and
 * L2-normalised, as `serve --embeddings` does. The file records the model's
 * name and fingerprint and the pooling, so a query is embedded the same way
 * or refused. Dense retrieval ranks every chunk by cosine to the question's
 * vector; hybrid fuses the BM25 ranking (chunks with a positive score) and
 * the dense ranking (every chunk) by reciprocal rank: score = sum over the
 * two lists of 1 / (rrf_k + rank), ranks from 1, a list the chunk is
 * missing from adding nothing. Ties rank the lower id first. */

/* How a text's final hidden rows become one vector (the values of serve's kvt_pooling). */
typedef enum { KVT_RAG_POOL_MEAN = 1, KVT_RAG_POOL_LAST = 2, KVT_RAG_POOL_CLS = 3 } kvt_rag_pooling;
const char *kvt_rag_pooling_name(int p);  /* "mean", "last", "cls"; "?" otherwise */
int kvt_rag_pooling_parse(const char *s); /* -1 for another name */
/* The model's <arch>.pooling_type (mean when absent or "none"): 0, or KVT_EFORMAT naming the key. */
int kvt_rag_pooling_default(const kvt_model *m, kvt_rag_pooling *out);

/* An embedder: a one-sequence CPU engine over a fully loaded model (borrowed). */
typedef struct kvt_rag_embedder kvt_rag_embedder;
int kvt_rag_embedder_new(const kvt_model *m, kvt_rag_pooling pool, int32_t n_threads, kvt_rag_embedder **out);
/* The same on an engine's device (kvt_engine_params.device: 0 the CPU, 1 + N
 * Vulkan device N). A GPU's vectors agree with the CPU's to rounding. */
int kvt_rag_embedder_new_on(const kvt_model *m, kvt_rag_pooling pool, int32_t n_threads, int32_t device,
                            kvt_rag_embedder **out);
int32_t kvt_rag_embedder_dim(const kvt_rag_embedder *e);
/* text's pooled, L2-normalised vector into out (dim floats). The text is
 * tokenized with the model's own start token, special-token spellings read
 * as plain text, and cut to the engine's context. 0 or a negative code. */
int kvt_rag_embed(kvt_rag_embedder *e, const char *text, size_t len, float *out);
void kvt_rag_embedder_free(kvt_rag_embedder *e);

/* What an index's vectors were made with (borrowed from the index). */
typedef struct {
    int32_t dim; /* 0: the index has no vectors */
    kvt_rag_pooling pooling;
    kvt_fingerprint fingerprint;
    const char *model; /* the model file's base name */
} kvt_rag_vec_info;
kvt_rag_vec_info kvt_rag_vectors(const kvt_rag_index *idx);
const float *kvt_rag_vector_at(const kvt_rag_index *idx, int32_t chunk); /* NULL without vectors */
/* Gives the index vectors (n_chunks x dim floats, copied) made by model m
 * (its path's base name and fingerprint are recorded) pooled as pool. */
void kvt_rag_set_vectors(kvt_rag_index *idx, const float *vecs, int32_t dim, const kvt_model *m, kvt_rag_pooling pool);
/* Whether a question may be embedded with m pooled as pool for this index:
 * 0, or KVT_EARG with a message naming the index's model and pooling and the
 * ones given (no vectors, another model or size, another pooling). */
int kvt_rag_check_embedder(const kvt_rag_index *idx, const kvt_model *m, kvt_rag_pooling pool);

typedef enum { KVT_RAG_RETRIEVE_BM25 = 0, KVT_RAG_RETRIEVE_DENSE = 1, KVT_RAG_RETRIEVE_HYBRID = 2 } kvt_rag_retrieve;
const char *kvt_rag_retrieve_name(kvt_rag_retrieve r); /* "bm25", "dense", "hybrid" */
int kvt_rag_retrieve_parse(const char *s);             /* -1 for another name */

/* The k best chunks by cosine to qvec (dim floats), best first; 0 without vectors. */
int32_t kvt_rag_query_dense(const kvt_rag_index *idx, const float *qvec, int32_t k, kvt_rag_hit *out);
/* The k best by reciprocal rank fusion of BM25 for question and cosine to
 * qvec (rrf_k >= 1), best first; the hit's score is the fused score. */
int32_t kvt_rag_query_hybrid(const kvt_rag_index *idx, const char *question, const float *qvec, int32_t k,
                             int32_t rrf_k, kvt_rag_hit *out);
/* One of the three by mode (qvec may be NULL for bm25). */
int32_t kvt_rag_retrieve_k(const kvt_rag_index *idx, kvt_rag_retrieve mode, const char *question, const float *qvec,
                           int32_t k, int32_t rrf_k, kvt_rag_hit *out);

#endif
