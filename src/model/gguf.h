// SPDX-License-Identifier: MIT
/* GGUF v2/v3 reader (over mmap or a caller's buffer) and writer.
 *
 * The reader validates every offset, size, type, count and string before use;
 * a malformed or truncated file gets KVT_EFORMAT and a kvt_errmsg() naming what
 * is wrong. After kvt_gguf_open() succeeds, every accessor is bounds-safe.
 *
 * File layout (all little-endian):
 *   u32 magic "GGUF", u32 version, u64 n_tensors, u64 n_kv
 *   n_kv x { string key, u32 value_type, value }
 *   n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset }
 *   padding to `general.alignment` (default 32), then the tensor data section;
 *   each tensor's offset is relative to the data section and aligned.
 *   string = u64 length + bytes (no NUL); array = u32 elem_type, u64 n, elems.
 */
#ifndef KVT_GGUF_H
#define KVT_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "kvtier.h"
#include "types.h"

/* GGUF metadata value types */
enum kvt_gguf_vtype {
    KVT_GGUF_U8 = 0,
    KVT_GGUF_I8 = 1,
    KVT_GGUF_U16 = 2,
    KVT_GGUF_I16 = 3,
    KVT_GGUF_U32 = 4,
    KVT_GGUF_I32 = 5,
    KVT_GGUF_F32 = 6,
    KVT_GGUF_BOOL = 7,
    KVT_GGUF_STRING = 8,
    KVT_GGUF_ARRAY = 9,
    KVT_GGUF_U64 = 10,
    KVT_GGUF_I64 = 11,
    KVT_GGUF_F64 = 12,
    KVT_GGUF_VTYPE_COUNT
};

#define KVT_GGUF_MAX_DIMS 4
#define KVT_GGUF_DEFAULT_ALIGNMENT 32

/* Type name ("F16"), or NULL for an unknown id. */
const char *kvt_ggml_type_name(uint32_t type);
/* Elements per block and bytes per block; 0 for an unknown id. */
uint32_t kvt_ggml_block_elems(uint32_t type);
uint32_t kvt_ggml_block_bytes(uint32_t type);
/* Bytes of a row of n elements (n must be a multiple of the block size); 0 if not. */
uint64_t kvt_ggml_row_bytes(uint32_t type, uint64_t n);

typedef struct {
    char *name; /* NUL-terminated copy */
    uint32_t n_dims;
    uint64_t ne[KVT_GGUF_MAX_DIMS]; /* ne[0] is the contiguous (row) dimension; unused = 1 */
    uint32_t type;                  /* enum kvt_ggml_type */
    uint64_t offset;                /* relative to the data section */
    uint64_t nbytes;
    const void *data; /* into the mapping; NULL when the file has no data (vocab-only writer) */
} kvt_gguf_tensor;

typedef struct {
    char *key;     /* NUL-terminated copy */
    uint32_t type; /* enum kvt_gguf_vtype */
    /* scalars: */
    const uint8_t *val; /* raw little-endian bytes of the value (may be unaligned) */
    char *str;          /* STRING: NUL-terminated copy (embedded NULs possible: use str_len) */
    uint64_t str_len;
    /* arrays: */
    uint32_t arr_type;     /* element type */
    uint64_t arr_n;        /* element count */
    const uint8_t *arr;    /* first element */
    uint64_t *arr_str_off; /* STRING arrays: offset of each element's u64 length from arr */
} kvt_gguf_kv;

typedef struct kvt_gguf {
    const uint8_t *base; /* whole file */
    size_t size;
    int mapped; /* base is an mmap we own */
    uint32_t version;
    uint64_t n_kv, n_tensors;
    kvt_gguf_kv *kv;
    kvt_gguf_tensor *tensors;
    uint64_t alignment;
    uint64_t data_offset; /* start of the data section in the file */
} kvt_gguf;

/* Maps and validates path. On failure returns a negative code, *out = NULL and
 * kvt_errmsg() names the file and the problem. */
int kvt_gguf_open(const char *path, kvt_gguf **out);
/* Validates a caller-owned buffer (it must outlive the handle). For fuzzing. */
int kvt_gguf_open_mem(const void *data, size_t size, kvt_gguf **out);
void kvt_gguf_close(kvt_gguf *g);

/* Metadata lookup: the kv, or NULL when absent. */
const kvt_gguf_kv *kvt_gguf_find(const kvt_gguf *g, const char *key);

/* Typed getters. Return 0, KVT_ENOTFOUND when absent, KVT_ETYPE when the value
 * has an incompatible type (any integer or bool converts to int64; ints and
 * floats convert to double; a u64 above INT64_MAX is KVT_ETYPE). */
int kvt_gguf_get_int(const kvt_gguf *g, const char *key, int64_t *out);
int kvt_gguf_get_float(const kvt_gguf *g, const char *key, double *out);
/* String value: points into the handle (valid until close), NUL-terminated. */
int kvt_gguf_get_str(const kvt_gguf *g, const char *key, const char **out);
/* Array: element type and count; KVT_ETYPE if the value is not an array. */
int kvt_gguf_get_arr(const kvt_gguf *g, const char *key, const kvt_gguf_kv **out);

/* Array elements (no bounds check beyond an assert: i < kv->arr_n). Numeric
 * getters convert any numeric element type. */
int64_t kvt_gguf_arr_int(const kvt_gguf_kv *kv, uint64_t i);
double kvt_gguf_arr_float(const kvt_gguf_kv *kv, uint64_t i);
/* String element: pointer into the file (NOT NUL-terminated) and its length. */
const char *kvt_gguf_arr_str(const kvt_gguf_kv *kv, uint64_t i, uint64_t *len);

/* Tensor lookup by name, or NULL. */
const kvt_gguf_tensor *kvt_gguf_tensor_find(const kvt_gguf *g, const char *name);

/* ---- writer ----------------------------------------------------------------
 * Builds a GGUF in memory then writes it atomically (temp file + fsync + rename).
 * Tensor data is supplied by a callback so huge models never sit in RAM twice. */

typedef struct kvt_gguf_writer kvt_gguf_writer;

kvt_gguf_writer *kvt_gguf_writer_new(void);
void kvt_gguf_writer_free(kvt_gguf_writer *w);
void kvt_gguf_w_str(kvt_gguf_writer *w, const char *key, const char *val);
void kvt_gguf_w_u32(kvt_gguf_writer *w, const char *key, uint32_t val);
void kvt_gguf_w_i32(kvt_gguf_writer *w, const char *key, int32_t val);
void kvt_gguf_w_f32(kvt_gguf_writer *w, const char *key, float val);
void kvt_gguf_w_bool(kvt_gguf_writer *w, const char *key, int val);
/* Copies a kv (any type, arrays included) verbatim from a reader. */
void kvt_gguf_w_copy(kvt_gguf_writer *w, const kvt_gguf_kv *kv);
/* Numeric array of n elements of vtype (elems in host little-endian layout). */
void kvt_gguf_w_arr(kvt_gguf_writer *w, const char *key, uint32_t vtype, const void *elems, uint64_t n);
/* String array from n NUL-terminated strings. */
void kvt_gguf_w_arr_str(kvt_gguf_writer *w, const char *key, const char *const *strs, uint64_t n);

/* Fills buf (nbytes) with the tensor's data; returns 0 or a negative code. */
typedef int (*kvt_gguf_fill_fn)(void *ctx, const char *name, void *buf, uint64_t nbytes);
/* Declares a tensor; ne[0] is the row length. Data comes from fill at write time. */
void kvt_gguf_w_tensor(kvt_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const uint64_t *ne,
                       kvt_gguf_fill_fn fill, void *ctx);
/* Writes the file atomically: a temporary file beside path (path.tmp.PID,
 * created exclusively and never through a symlink), fsync, rename over path,
 * fsync of the directory. On failure path is as it was and the temporary
 * file is removed. Returns 0 or a negative code (kvt_errmsg() says why). */
int kvt_gguf_write(kvt_gguf_writer *w, const char *path);

#endif
