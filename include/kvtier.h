// SPDX-License-Identifier: MIT
/* kvtier public API.
 *
 * Conventions (the same everywhere):
 *  - Functions return int: 0 on success, a negative code on failure. Codes in
 *    [KVT_ERR_FIRST, KVT_ERR_LAST] are kvtier's own; any other negative value is
 *    -errno from the operating system. kvt_strerror() names both.
 *  - After a failure, kvt_errmsg() returns a human-readable detail for the calling
 *    thread ("tensor blk.3.attn_q.weight: offset 123 past end of file"). The
 *    string is owned by kvtier and valid until the next failing call on that thread.
 *  - Handles are opaque; free them with the matching *_free / *_close.
 *  - Params structs are passed by value; get defaults from *_default_params().
 *
 * This header is the whole API and includes only <stddef.h> and <stdint.h>.
 * Build against the installed library with `pkg-config --cflags --libs kvtier`
 * (libkvtier.so, SONAME libkvtier.so.<major of KVT_VERSION>) or
 * `pkg-config --static --libs kvtier` with libkvtier.a; examples/embed.c is a
 * complete program.
 */
#ifndef KVTIER_H
#define KVTIER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVT_VERSION "0.1.0"

/* Marks the functions of this API: the only symbols libkvtier.so exports (the
 * library is built with hidden visibility by default). */
#if defined(__GNUC__) || defined(__clang__)
#define KVT_API __attribute__((visibility("default")))
#else
#define KVT_API
#endif

/* kvtier's own error codes: a reserved negative range, well away from -errno. */
enum {
    KVT_ERR_FIRST = -30000,
    KVT_EFORMAT = -30000,      /* a file or message is malformed */
    KVT_EUNSUPPORTED = -29999, /* valid input that kvtier does not handle (yet) */
    KVT_ENOTFOUND = -29998,    /* a named key, tensor or token does not exist */
    KVT_ETYPE = -29997,        /* a value has the wrong type */
    KVT_ELIMIT = -29996,       /* a size or count is over a limit */
    KVT_EARG = -29995,         /* a caller passed an invalid argument */
    KVT_EPAGE = -29994,        /* one KV page is larger than the device binds at once: a smaller block size fits */
    KVT_ERR_LAST = -29994,
};

/* Name of an error code (ours or -errno). Never NULL; static storage. */
KVT_API const char *kvt_strerror(int err);

/* Detail of the calling thread's last failure. Never NULL (empty if none);
 * valid until the next failing kvtier call on this thread. */
KVT_API const char *kvt_errmsg(void);

/* ---- models ------------------------------------------------------------ */

/* Element type of K and V in the page pool, and so in every tier (T1 blocks
 * and T2 records are copies of pages). Bytes per token, relative to f16:
 * f32 2x, q8_0 34/64 (blocks of 32 values: an f16 scale and 32 int8, as
 * llama.cpp's -ctk/-ctv q8_0). q8_0 needs a head_dim that is a multiple of 32.
 * Cache keys include the dtype, so blocks of different dtypes never mix. */
typedef enum { KVT_KV_F16 = 0, KVT_KV_F32 = 1, KVT_KV_Q8_0 = 2 } kvt_kv_dtype;

/* "f16", "f32", "q8_0"; static storage. */
KVT_API const char *kvt_kv_dtype_name(kvt_kv_dtype dt);
/* Parses one of those names into *out. Returns 0 or KVT_EARG. */
KVT_API int kvt_kv_dtype_parse(const char *name, kvt_kv_dtype *out);

typedef struct kvt_model kvt_model;

/* 128-bit model fingerprint: covers the architecture, every shape and rope
 * parameter that changes K/V, and a content sample of the weights, so two
 * fine-tunes of one base never share cache keys (docs/design.md "Blocks and keys"). */
typedef struct {
    uint64_t lo, hi;
} kvt_fingerprint;

typedef struct {
    int vocab_only; /* load tokenizer metadata only; tensors may be absent */
} kvt_model_params;

KVT_API kvt_model_params kvt_model_default_params(void);

/* Opens and validates a GGUF model. The file is memory-mapped and stays mapped
 * until kvt_model_free(). On failure *out is NULL and kvt_errmsg() says why. */
KVT_API int kvt_model_load(const char *path, kvt_model_params params, kvt_model **out);
KVT_API void kvt_model_free(kvt_model *model);

/* The model's fingerprint (valid for every loaded model, including vocab-only). */
KVT_API kvt_fingerprint kvt_model_fingerprint(const kvt_model *model);

/* What an embedder needs to know of a loaded model. A vocab-only model has
 * its vocabulary and tokens but zero shapes (n_ctx_train, n_embd, ...). */
typedef struct {
    int32_t n_vocab;     /* token ids are 0..n_vocab-1 */
    int32_t n_ctx_train; /* the context the model was trained for */
    int32_t n_embd, n_layer, n_head, n_head_kv, head_dim;
    int32_t bos, eos;          /* -1 where the vocabulary has none */
    int add_bos, add_eos;      /* whether kvt_model_tokenize's add_special adds them for this model */
    const char *chat_template; /* tokenizer.chat_template (Jinja text) or NULL; valid until kvt_model_free */
} kvt_model_info;

KVT_API kvt_model_info kvt_model_get_info(const kvt_model *model);

/* The text of one token: the bytes it stands for (a piece may be part of a
 * UTF-8 character: print pieces in sequence). Control tokens render as their
 * text with render_special, else as nothing. Writes up to cap bytes (no NUL)
 * and returns the full length: call again with a larger buffer if it is
 * > cap. KVT_EARG for an id outside the vocabulary. */
KVT_API int kvt_model_token_piece(const kvt_model *model, int32_t token, char *buf, size_t cap, int render_special);

/* 1 if token ends generation (EOS, EOT and the like), else 0. kvt_complete
 * stops at these. */
KVT_API int kvt_model_is_eog(const kvt_model *model, int32_t token);

/* Bytes of K and V per token in every tier for a KV dtype (all layers). */
KVT_API uint64_t kvt_model_kv_token_bytes(const kvt_model *model, kvt_kv_dtype dt);


/* Tokenizes len bytes of text with the model's tokenizer (special-token text
 * such as "<|im_start|>" maps to those tokens when parse_special). With
 * add_special (KVT_TOKENIZE_ADD_SPECIAL, or any nonzero value), BOS and EOS
 * are added as llama.cpp adds them for this model (tokenizer.ggml.add_bos_token
 * / add_eos_token, else BOS for SentencePiece vocabularies and llama3-style
 * BPE ones, never EOS; kvt_model_info's add_bos / add_eos say which); with
 * KVT_TOKENIZE_NO_BOS also set, BOS is left out (llama.cpp's --no-bos); with
 * 0, neither. *out is malloc'd; the caller frees it. Returns 0 or a negative
 * code. */
#define KVT_TOKENIZE_ADD_SPECIAL 1
#define KVT_TOKENIZE_NO_BOS 2
KVT_API int kvt_model_tokenize(const kvt_model *model, const char *text, size_t len, int add_special, int parse_special,
                               int32_t **out, size_t *n_out);

/* Fixed context blocks (docs/rag.md "Documents as fixed context blocks"). A document is rendered as the
 * text "Document <id>:\n<text>\n" (tokenized as plain text: special-token
 * text in it stays text), then padded with the padding token (the model's
 * newline token; its space token where a newline is not one token) to a
 * multiple of block_size tokens. The documents are inserted, in the order
 * given, at token offset `at` of prompt[0..n), which is itself padded to a
 * block boundary first. So every document starts and ends on a cache-block
 * boundary, its KV blocks never straddle two documents, and the same
 * document after the same preceding tokens is always the same blocks.
 * kvtier inserts them before the prompt (after BOS) for completions and
 * before the last user message's content for chat.
 * *out is malloc'd (caller frees). Returns 0, KVT_EARG (at > n, a NULL text
 * or id, two documents with the same id, block_size < 1) or KVT_EUNSUPPORTED
 * (no single-token padding). */
typedef struct {
    const char *id;   /* shown in the rendered text; borrowed */
    const char *text; /* borrowed */
} kvt_document;

KVT_API int kvt_render_documents(const kvt_model *model, int32_t block_size, const int32_t *prompt, size_t n, size_t at,
                                 const kvt_document *docs, size_t n_docs, int32_t **out, size_t *n_out);

/* kvt_render_documents, also saying where each document landed: when starts
 * is non-NULL it receives n_docs + 1 entries, starts[i] document i's first
 * token in *out and starts[n_docs] the token after the last document's
 * padding (untouched when n_docs is 0). What kvt_request.doc_starts takes. */
KVT_API int kvt_render_documents_spans(const kvt_model *model, int32_t block_size, const int32_t *prompt, size_t n,
                                       size_t at, const kvt_document *docs, size_t n_docs, int32_t **out, size_t *n_out,
                                       size_t *starts);

/* The token kvt_render_documents pads with, or a negative code. */
KVT_API int32_t kvt_document_pad_token(const kvt_model *model);

/* ---- engine -------------------------------------------------------------- */

/* The compute engine: a pool of KV pages (T0) and the forward pass. One thread
 * uses an engine at a time; it runs its own worker threads inside. */
typedef struct kvt_engine kvt_engine;


#define KVT_DEFAULT_BLOCK_SIZE 32
#define KVT_DEFAULT_N_BATCH 512
#define KVT_DEFAULT_MAX_SEQS 16
#define KVT_DEFAULT_KV_ACTIVE_BYTES (256ull << 20)

typedef struct {
    int32_t block_size;       /* tokens per page = cache block (B) */
    kvt_kv_dtype kv_dtype;    /* element type of K and V in pages */
    uint64_t kv_active_bytes; /* page pool budget (T0, --kv-active); n_pages = budget / page bytes */
    int32_t n_pages;          /* if > 0, the pool size in pages (overrides kv_active_bytes: the engine's
                                 params then report it 0) */
    int32_t n_threads;        /* worker threads for matmuls and attention */
    int32_t n_batch;          /* prefill chunk: at most this many tokens per forward pass */
    int32_t max_seqs;         /* sequences that can exist at once */
    int32_t n_ctx;            /* max tokens per sequence; 0 = the model's training context */
    int32_t device;           /* where the forward pass and T0 live: 0 = the CPU (host RAM);
                                 N + 1 = Vulkan device N (kvtier info --devices) */
    /* On a device: the share of its memory the engine may take (0 < f <= 1,
     * 0 or default: KVT_DEFAULT_GPU_MEMORY_FRACTION). With n_pages 0 and
     * kv_active_bytes 0 the pool is planned: what that share leaves after the
     * weights and the activations, at least one n_ctx context (else
     * KVT_ELIMIT saying what fits); a pool given by size must fit in it. */
    float gpu_memory_fraction;
    int32_t n_gpu_layers; /* layers on the device: -1 (default) or >= n_layer = all of them;
                             fewer (partial offload) is refused with KVT_EUNSUPPORTED for now */
} kvt_engine_params;

#define KVT_DEFAULT_GPU_MEMORY_FRACTION 0.9f

KVT_API kvt_engine_params kvt_engine_default_params(void);

/* Creates an engine for a loaded model. The model must outlive the engine.
 * Fails with KVT_EARG for nonsensical params (including q8_0 KV for a model
 * whose head_dim is not a multiple of 32) and KVT_ELIMIT when the budget
 * holds no page. *out is NULL on failure. Free with kvt_engine_free. */
KVT_API int kvt_engine_new(const kvt_model *model, kvt_engine_params params, kvt_engine **out);
KVT_API void kvt_engine_free(kvt_engine *e);
/* The engine's effective params: n_pages, n_ctx and the rest as created. */
KVT_API kvt_engine_params kvt_engine_get_params(const kvt_engine *e);
/* Bytes of one page of the pool: one block of K and V for every layer. */
KVT_API size_t kvt_engine_page_bytes(const kvt_engine *e);

/* ---- cache ------------------------------------------------------------------ */

/* Cache tiers, fastest first. */
typedef enum {
    KVT_TIER_T0 = 0, /* active: the engine's page pool */
    KVT_TIER_T1 = 1, /* host RAM */
    KVT_TIER_T2 = 2, /* local disk */
    KVT_TIER_T3 = 3, /* shared remote store */
    KVT_TIER_COUNT
} kvt_tier;

/* The KV cache over an engine: the prefix index, T0 residency (the engine's
 * page pool) and the tiers below it (T1 host RAM, T2 local disk, T3 a shared
 * Redis/Valkey store; each optional), with demotion, restore, pins and warm
 * sessions. Not thread-safe: the engine's owner serialises every call. */
typedef struct kvt_cache kvt_cache;

/* Whether blocks matched on disk are read back or recomputed. */
typedef enum {
    KVT_RESTORE_AUTO = 0,   /* read only where measured read time < measured prefill time */
    KVT_RESTORE_ALWAYS = 1, /* always read */
    KVT_RESTORE_NEVER = 2,  /* never read from disk (recompute) */
} kvt_restore_policy;

#define KVT_DEFAULT_DISK_BYTES (16ull << 30)
#define KVT_DEFAULT_REMOTE_BYTES (4ull << 30)
#define KVT_DEFAULT_ADMIT_LIVE_S 600.0

/* Which blocks leaving RAM are written to disk. */
typedef enum {
    KVT_ADMIT_ALL = 0,    /* every one: inactive KV is kept while the disk has room (default) */
    KVT_ADMIT_REUSED = 1, /* blocks used within admit_live_s always; older ones only if seen twice */
} kvt_admit_policy;

/* Why a request reused fewer tokens than its lookup matched. */
typedef enum {
    KVT_SHORTFALL_NONE = 0,
    KVT_SHORTFALL_RECOMPUTE = 1, /* disk blocks skipped: recomputing was measured faster */
    KVT_SHORTFALL_NO_ROOM = 2,   /* the active pool could not hold the whole run */
    KVT_SHORTFALL_LOST = 3,      /* a block vanished or failed its checks between lookup and restore */
    KVT_SHORTFALL_COUNT
} kvt_shortfall;

/* "none", "recompute_cheaper", "no_room", "lost"; static storage. */
KVT_API const char *kvt_shortfall_name(kvt_shortfall s);

/* Where a request's reuse stopped, and why (docs/api.md "Why did this miss?"). */
typedef enum {
    KVT_REUSE_END_OF_PROMPT = 0,  /* every full cached block of the prompt was reused: not a miss */
    KVT_REUSE_SHORT_PROMPT = 1,   /* fewer than B prompt tokens: no full block to cache or reuse */
    KVT_REUSE_DIVERGED = 2,       /* a cached block continues the same parent but its tokens differ */
    KVT_REUSE_NEVER_SEEN = 3,     /* no cached block continues this parent at all */
    KVT_REUSE_EVICTED = 4,        /* this very block was cached, and recently left every tier */
    KVT_REUSE_NAMESPACE = 5,      /* block 0 is cached in the shared (unsalted) namespace, not this one */
    KVT_REUSE_RESTORE_SLOWER = 6, /* matched disk blocks recomputed: measured cheaper than reading */
    KVT_REUSE_NO_ROOM = 7,        /* the active pool could not hold the whole matched run */
    KVT_REUSE_LOST = 8,           /* a matched block vanished or failed its checks before restore */
    KVT_REUSE_REASON_COUNT
} kvt_reuse_reason;

/* "end_of_prompt", "prompt_shorter_than_block", "diverged", "never_seen",
 * "evicted", "different_namespace", "restore_skipped_slower", "no_room",
 * "lost"; "?" otherwise. Static storage. */
KVT_API const char *kvt_reuse_reason_name(kvt_reuse_reason r);

#define KVT_REUSE_STOP_TOKENS 6 /* differing tokens reported on each side */

/* The explanation. block is the first prompt block not reused (0-based);
 * token_offset the first prompt token not taken from the cache, except for
 * diverged, where it is the first token that differs from the nearest cached
 * block (same parent, longest common token prefix with the prompt's block),
 * so token_offset - block * B prompt tokens agreed with it. prompt_ids and
 * cached_ids hold up to KVT_REUSE_STOP_TOKENS tokens from token_offset on,
 * from the prompt and from that cached block (diverged only). */
typedef struct {
    kvt_reuse_reason reason;
    int32_t block;
    int32_t token_offset;
    int32_t n_prompt_ids, n_cached_ids;
    int32_t prompt_ids[KVT_REUSE_STOP_TOKENS];
    int32_t cached_ids[KVT_REUSE_STOP_TOKENS];
} kvt_reuse_stop;

/* One line for a log or a stats line: "reason@block/token_offset", plus for
 * diverged ' "prompt text" vs "cached text"' (the differing tokens' text,
 * control characters escaped), as `kvtier run` prints it. model may be NULL
 * (no texts). Writes at most cap bytes, NUL-terminated; returns buf. */
KVT_API char *kvt_reuse_stop_describe(const kvt_model *model, const kvt_reuse_stop *stop, char *buf, size_t cap);

typedef struct {
    uint64_t ram_bytes;          /* T1 host-RAM budget (--kv-ram); 0 disables T1 */
    const char *disk_dir;        /* T2 cache directory (--kv-disk); NULL disables T2. Borrowed for kvt_cache_new. */
    uint64_t disk_bytes;         /* T2 budget (--kv-disk-size); the directory never exceeds it plus one segment */
    int disk_zstd;               /* compress T2 records with zstd (lossless) */
    kvt_admit_policy disk_admit; /* which blocks leaving RAM go to disk (default all) */
    double admit_live_s;         /* KVT_ADMIT_REUSED: blocks used this recently always go down (default 600) */
    uint32_t disk_put_wait_ms;   /* back-pressure: how long a demotion waits for the disk writer before
                                  the block is dropped and counted (default 5000) */
    int disk_no_mac;             /* T2 records without the directory's keyed MAC (--kv-disk-no-mac): CRCs only,
                                so whoever can write the directory can choose what is served (default: MAC on) */
    double disk_space_retry_s;   /* with T2 writes stopped by a full disk: how often the free space is checked
                                  before they resume (--kv-disk-space-retry); 0: the default, 5 */
    const char *remote_url;      /* T3 shared store (--kv-remote redis://[user:pass@]host:port[/db] or
                                unix:///path); NULL disables T3. Borrowed for kvt_cache_new. */
    uint64_t remote_bytes;       /* T3 soft budget (--kv-remote-size): capacity and stats; Redis's own
                                maxmemory policy evicts */
    uint32_t remote_ttl_s;       /* T3 value expiry (--kv-remote-ttl); 0: none */
    const char *remote_key_file; /* T3 MAC key (--kv-remote-key-file), required with remote_url:
                                    32 bytes, 0600, shared by the fleet. Borrowed for kvt_cache_new. */
    uint32_t remote_timeout_ms;  /* T3 per-call read deadline (--kv-remote-timeout-ms; default 250) */
    int remote_zstd;             /* compress T3 values with zstd (--kv-remote-compress zstd); readers take either */
    int remote_zstd_level;       /* with remote_zstd (--kv-remote-zstd-level); 0: the default, 1 */
    uint32_t remote_read_conns;  /* T3 read connections and threads (--kv-remote-conns); 0: the default, 4 */
    int64_t remote_retry_bytes;  /* T3 writes held while Redis is unreachable, sent when it answers again
                                   (--kv-remote-retry-size); 0: the default, 64 MiB; < 0: none (dropped) */
    int write_through;           /* also write each new block to T2 (and T3) as soon as it is computed */
    kvt_restore_policy restore;
    /* Redis's password for T3 (--kv-remote-password-file): a file of one line, 0600, sent with the URL's
     * user on every connection; NULL: the URL's, if any. Borrowed for kvt_cache_new. */
    const char *remote_password_file;
} kvt_cache_params;

KVT_API kvt_cache_params kvt_cache_default_params(void);

/* Creates a cache over an engine (borrowed: it must outlive the cache). Free
 * the cache before the engine. With a disk directory, opens it (taking its
 * lock: a second process gets -EWOULDBLOCK and a message naming the owner) and
 * indexes the blocks a previous run left there. Returns 0 or a negative code. */
KVT_API int kvt_cache_new(kvt_engine *e, kvt_cache_params params, kvt_cache **out);
/* Graceful shutdown: writes every cached block no persistent tier holds (T0
 * pages and the RAM tier's blocks) to the first persistent tier (the disk,
 * else the remote store) and waits for the writes. The RAM tier is empty
 * afterwards. No-op without a persistent tier. Returns 0 or a persistent
 * tier's write error. */
KVT_API int kvt_cache_flush(kvt_cache *c);
/* Frees the cache without flushing (call kvt_cache_flush first to persist). */
KVT_API void kvt_cache_free(kvt_cache *c);

/* What a lookup found: the leading full blocks of a token sequence available
 * in some tier (a block is B tokens; a partial tail is never cached). */
typedef struct {
    int32_t n_blocks;
    int32_t n_tokens;                    /* n_blocks * B */
    int32_t tier_blocks[KVT_TIER_COUNT]; /* by the fastest tier holding each block */
} kvt_cache_match;

/* Longest cached prefix of tokens[0..n) for a tenant salt (NULL, 0 = shared).
 * Changes nothing but statistics. Returns 0 or a negative code. */
KVT_API int kvt_cache_lookup(kvt_cache *c, const int32_t *tokens, int32_t n, const void *salt, size_t salt_len,
                             kvt_cache_match *out);

/* Pins the cached prefix of tokens in T0 (restoring lower-tier blocks into
 * pages): pinned blocks are never evicted until released. Returns the number
 * of pinned tokens (>= 0) or a negative code; *pin receives a handle (NULL when
 * nothing was pinned) owned by the caller until kvt_cache_release. */
typedef struct kvt_pin kvt_pin;
KVT_API int kvt_cache_pin(kvt_cache *c, const int32_t *tokens, int32_t n, const void *salt, size_t salt_len,
                          kvt_pin **pin);
/* Releases a pin (NULL is a no-op); the blocks become evictable again. */
KVT_API void kvt_cache_release(kvt_cache *c, kvt_pin *pin);

/* Sessions. An agent waiting on a tool can ask the cache to keep its context
 * warm: kvt_cache_keep_warm pins the T0-resident prefix of tokens (typically
 * the prompt and reply just finished) under a session name for `seconds`. A
 * warm session is a soft pin: when running work needs the pages, sessions
 * give them up, lowest priority first, then the soonest to expire; their
 * blocks are then demoted to RAM and disk like any idle block, never lost.
 * A session is named within its salt's namespace: the same name under two
 * salts is two sessions. A new call for the same session (name and salt)
 * replaces its pin; seconds <= 0 (or
 * kvt_cache_end_session) ends it. Returns the tokens kept warm (>= 0) or a
 * negative code (KVT_EARG: bad name). Session names are 1..KVT_SESSION_NAME_MAX
 * bytes; they are copied. */
#define KVT_SESSION_NAME_MAX 128
KVT_API int kvt_cache_keep_warm(kvt_cache *c, const char *session, const int32_t *tokens, int32_t n, const void *salt,
                                size_t salt_len, int priority, double seconds);
/* Ends the warm sessions of that name, under every salt (their pages become
 * evictable). 0 or KVT_ENOTFOUND. */
KVT_API int kvt_cache_end_session(kvt_cache *c, const char *session);
/* Restores the cached prefix of tokens into T0 now (from T1/T2), so a request
 * that follows finds it resident; the pages stay cached but unpinned.
 * Returns the tokens resident afterwards (>= 0) or a negative code. */
KVT_API int32_t kvt_cache_prefetch(kvt_cache *c, const int32_t *tokens, int32_t n, const void *salt, size_t salt_len);

/* One Redis Cluster node of T3, as this node used it (kvt_cache_stats.t3_shards). */
#define KVT_T3_SHARDS_MAX 16
#define KVT_T3_ADDR_MAX 96
typedef struct {
    char addr[KVT_T3_ADDR_MAX]; /* host:port */
    int primary;                /* owns slots in the current map */
    uint64_t hits, misses;      /* blocks read from it, and not (nil, refused, lost) */
    uint64_t redirects;         /* MOVED/ASK replies it gave */
    uint64_t errors;            /* connection failures and timeouts on it */
    uint64_t puts;              /* values it stored */
} kvt_t3_shard_stats;

typedef struct {
    int32_t t0_pages_total, t0_pages_free;
    int32_t t0_pages_cached; /* pages holding an indexed block */
    int32_t t0_pages_idle;   /* of those, used by no sequence or pin (evictable) */
    uint64_t t0_bytes_cached;
    uint64_t t0_evictions; /* pages reclaimed from T0 */
    uint64_t t1_blocks, t1_bytes_used, t1_budget_bytes;
    uint64_t t1_demotions; /* blocks written to T1 when evicted from T0 */
    uint64_t t1_restores;  /* blocks copied from T1 back into pages */
    uint64_t t1_evictions; /* blocks evicted from T1 */
    uint64_t t2_records, t2_bytes_used, t2_budget_bytes;
    uint64_t t2_demotions;                    /* blocks queued for writing to T2 */
    uint64_t t2_writes;                       /* records written */
    uint64_t t2_dropped;                      /* writes dropped (queue full past the wait, disk full, errors) */
    uint64_t t2_put_waits;                    /* demotions that waited for the disk writer (back-pressure) */
    uint64_t t2_queue_hits;                   /* blocks restored from the disk's write queue (not yet on disk) */
    uint64_t discarded;                       /* blocks that left T0/T1 and reached no lower tier (none, or full) */
    int32_t t0_pages_pinned;                  /* pages held by pins and warm sessions */
    int32_t warm_sessions;                    /* sessions kept warm now (kvt_cache_keep_warm) */
    uint64_t sessions_released;               /* warm sessions released early because running work needed the pages */
    uint64_t sessions_expired;                /* warm sessions whose time ran out */
    uint64_t prefetched_blocks;               /* blocks restored into T0 ahead of a request (pins, prefetch) */
    uint64_t shortfalls[KVT_SHORTFALL_COUNT]; /* requests that reused less than matched, by cause */
    uint64_t shortfall_tokens;                /* matched tokens those requests recomputed */
    uint64_t t2_not_admitted;                 /* evicted blocks the admission filter kept off the disk */
    uint64_t t2_restores;                     /* blocks read back into pages */
    uint64_t t2_recompute_decisions;          /* requests that recomputed disk blocks as cheaper than reading */
    uint64_t t2_bytes_read, t2_bytes_written, t2_corrupt;
    int t2_writes_disabled;   /* the disk failed (full, read-only): serving from RAM */
    int t2_out_of_space;      /* of that, writes stopped by a full disk: they resume when space is back */
    uint64_t t2_space_pauses; /* times T2 writes stopped for lack of space */
    double t2_compression_ratio;
    /* T3 (remote): known = blocks this node believes are in the store */
    uint64_t t3_known, t3_budget_bytes, t3_value_bytes;
    uint64_t t3_demotions;       /* blocks queued for the store (demotions and sharing) */
    uint64_t t3_writes;          /* values stored (SET answered) */
    uint64_t t3_dropped;         /* writes dropped (queue full, Redis down, errors) */
    uint64_t t3_restores;        /* blocks read back into pages */
    uint64_t t3_hits, t3_misses; /* reads per block (misses: absent, evicted, refused, unreachable) */
    uint64_t t3_bad;             /* values refused by CRC, MAC, codec or identity checks */
    uint64_t t3_bytes_read, t3_bytes_written;
    uint64_t t3_payload_written;               /* payload bytes of the values written, before compression */
    uint64_t t3_compressed, t3_incompressible; /* values written zstd-compressed; raw because they did not shrink */
    uint64_t t3_errors, t3_timeouts;           /* connection failures, deadlines passed, error replies */
    uint64_t t3_probes, t3_probe_found;        /* lookups that asked the store, blocks they found */
    uint64_t t3_round_trips;                   /* read calls that reached the store */
    double t3_latency_sum_s;                   /* their wall time */
    int t3_connected;                          /* 1 while the read connection is up; -1 when T3 is off */
    uint64_t t3_retry_held;                    /* blocks held for sending while Redis is unreachable, now */
    uint64_t t3_retry_sent, t3_retry_dropped;  /* held blocks sent later; held ones dropped (the cap was reached) */
    uint32_t t3_n_shards;                      /* Redis Cluster nodes known (0: one server); the first
                                                  KVT_T3_SHARDS_MAX are in t3_shards */
    kvt_t3_shard_stats t3_shards[KVT_T3_SHARDS_MAX];
    uint64_t index_entries[KVT_TIER_COUNT];
    uint64_t collisions;                          /* block keys that named another block (a miss, never wrong KV) */
    uint64_t lookups;                             /* requests matched against the cache */
    uint64_t lookup_tokens;                       /* their prompt tokens */
    uint64_t hit_tokens;                          /* of those, restored instead of computed */
    uint64_t reuse_stops[KVT_REUSE_REASON_COUNT]; /* requests by where their reuse stopped (kvt_reuse_stop) */
} kvt_cache_stats;

KVT_API void kvt_cache_get_stats(const kvt_cache *c, kvt_cache_stats *out);

/* Tokens of KV each tier can hold at its budget (T0: the page pool; T1: RAM
 * blocks with their overhead; T2: disk records with their header and
 * padding; 0 where a tier is off), for capacity planning. */
KVT_API void kvt_cache_capacity(const kvt_cache *c, uint64_t tokens[KVT_TIER_COUNT]);

/* ---- requests ---------------------------------------------------------------- */

/* How a request may reuse cached KV (docs/rag.md "Approximate reuse").
 *  - KVT_REUSE_MODE_EXACT (the default): only the KV of the very tokens before
 *    a block is reused, so greedy output is bit-identical to a run without
 *    the cache.
 *  - KVT_REUSE_MODE_APPROXIMATE (opt-in): documents of the prompt (doc_starts)
 *    that the exact prefix misses because they moved are placed from their
 *    stored KV at the new position (K rotated), and the recompute_ratio of
 *    their tokens whose KV deviates most is recomputed (the CacheBlend idea).
 *    Faster on reordered documents; the output is close to, not equal to,
 *    exact (equal with ratio 1), and depends on what the cache holds. Placed
 *    KV is never registered as exact cache blocks. */
typedef enum { KVT_REUSE_MODE_EXACT = 0, KVT_REUSE_MODE_APPROXIMATE = 1 } kvt_reuse_mode;

#define KVT_DEFAULT_RECOMPUTE_RATIO 0.15f /* CacheBlend's: ~15% recomputed keeps quality close to a full prefill */

typedef struct {
    int32_t max_tokens; /* tokens to generate at most */
    float temp;         /* <= 0: greedy */
    int32_t top_k;      /* <= 0: all */
    float top_p;        /* >= 1: all */
    uint64_t seed;
    const void *salt; /* tenant salt; NULL = shared */
    size_t salt_len;
    /* Called with each generated token; a nonzero return stops generation. */
    int (*on_token)(void *ctx, int32_t token);
    void *ctx;
    kvt_reuse_mode reuse; /* default KVT_REUSE_MODE_EXACT */
    /* With KVT_REUSE_MODE_APPROXIMATE (ignored otherwise): */
    float recompute_ratio;    /* fraction of the placed tokens recomputed, in [0, 1]; default 0.15 */
    const size_t *doc_starts; /* n_docs + 1 entries from kvt_render_documents_spans (ascending, block-aligned,
                                 the last <= n_prompt); borrowed for the call */
    size_t n_docs;
} kvt_request;

KVT_API kvt_request kvt_request_default_params(void);

typedef struct {
    int32_t n_prompt;
    int32_t n_cached;                    /* prompt tokens restored from the cache */
    int32_t tier_tokens[KVT_TIER_COUNT]; /* ... by tier */
    int32_t n_computed;                  /* prompt tokens prefilled */
    int32_t n_generated;
    double restore_ms, prefill_ms, ttft_ms, decode_ms;
    int t2_recomputed;         /* disk blocks matched but recomputing was cheaper */
    int32_t n_planned;         /* prompt tokens the lookup matched (n_cached when none were lost) */
    kvt_shortfall shortfall;   /* why n_cached < n_planned */
    kvt_reuse_stop reuse_stop; /* where reuse stopped and why */
    /* KVT_REUSE_MODE_APPROXIMATE: n_computed + n_cached + n_approximate = n_prompt */
    int32_t n_docs_placed; /* documents placed from stored KV */
    int32_t n_approximate; /* their tokens kept approximately (placed, not recomputed) */
    int32_t n_recomputed;  /* their tokens recomputed (counted in n_computed) */
    int32_t n_stored;      /* document tokens computed to store a document for placing */
} kvt_request_stats;

/* Runs one request on the cache's engine: reuses the longest cached prefix of
 * the prompt, prefills the rest, generates, and keeps every completed block
 * (prompt and generated) cached. *tokens_out (if non-NULL) receives a malloc'd
 * array of the prompt followed by the generated tokens. Greedy output is
 * bit-identical to a run without the cache (with KVT_REUSE_MODE_EXACT).
 * Returns 0 or a negative code. KVT_EARG, before anything runs or changes,
 * with kvt_errmsg() naming the field, for a reuse that is not a
 * kvt_reuse_mode, and with KVT_REUSE_MODE_APPROXIMATE for a recompute_ratio
 * outside [0, 1] (or NaN), no doc_starts, or doc_starts not ascending
 * within the prompt. */
KVT_API int kvt_complete(kvt_cache *c, const int32_t *prompt, int32_t n_prompt, const kvt_request *req,
                         int32_t **tokens_out, kvt_request_stats *stats);

#ifdef __cplusplus
}
#endif
#endif
