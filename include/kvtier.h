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
 */
#ifndef KVTIER_H
#define KVTIER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVT_VERSION "0.1.0"

/* kvtier's own error codes: a reserved negative range, well away from -errno. */
enum {
    KVT_ERR_FIRST = -30000,
    KVT_EFORMAT = -30000,      /* a file or message is malformed */
    KVT_EUNSUPPORTED = -29999, /* valid input that kvtier does not handle (yet) */
    KVT_ENOTFOUND = -29998,    /* a named key, tensor or token does not exist */
    KVT_ETYPE = -29997,        /* a value has the wrong type */
    KVT_ELIMIT = -29996,       /* a size or count is over a limit */
    KVT_EARG = -29995,         /* a caller passed an invalid argument */
    KVT_ERR_LAST = -29995,
};

/* Name of an error code (ours or -errno). Never NULL; static storage. */
const char *kvt_strerror(int err);

/* Detail of the calling thread's last failure. Never NULL (empty if none);
 * valid until the next failing kvtier call on this thread. */
const char *kvt_errmsg(void);

/* ---- models ------------------------------------------------------------ */

typedef struct kvt_model kvt_model;

/* 128-bit model fingerprint: covers the architecture, every shape and rope
 * parameter that changes K/V, and a content sample of the weights, so two
 * fine-tunes of one base never share cache keys (DESIGN.md "Blocks and keys"). */
typedef struct {
    uint64_t lo, hi;
} kvt_fingerprint;

typedef struct {
    int vocab_only; /* load tokenizer metadata only; tensors may be absent */
} kvt_model_params;

kvt_model_params kvt_model_default_params(void);

/* Opens and validates a GGUF model. The file is memory-mapped and stays mapped
 * until kvt_model_free(). On failure *out is NULL and kvt_errmsg() says why. */
int kvt_model_load(const char *path, kvt_model_params params, kvt_model **out);
void kvt_model_free(kvt_model *model);

/* The model's fingerprint (valid for every loaded model, including vocab-only). */
kvt_fingerprint kvt_model_fingerprint(const kvt_model *model);

#ifdef __cplusplus
}
#endif
#endif
