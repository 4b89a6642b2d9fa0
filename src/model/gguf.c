// SPDX-License-Identifier: MIT
/* GGUF reader and writer. The reader never trusts the file: every read goes
 * through a cursor that checks the remaining length, every count is bounded by
 * the bytes that could hold it, and tensors are checked for type, shape,
 * alignment, bounds and overlap before anyone sees them. */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define GGUF_MIN_VERSION 2
#define GGUF_MAX_VERSION 3
#define GGUF_MAX_ALIGNMENT (1u << 20)
#define GGUF_MAX_KEY_LEN 65535

/* ---- type tables ------------------------------------------------------- */

typedef struct {
    const char *name;
    uint32_t block_elems, block_bytes;
} type_info;

static const type_info type_table[KVT_TYPE_COUNT] = {
    [KVT_TYPE_F32] = {"F32", 1, 4},
    [KVT_TYPE_F16] = {"F16", 1, 2},
    [KVT_TYPE_Q4_0] = {"Q4_0", 32, 18},
    [KVT_TYPE_Q4_1] = {"Q4_1", 32, 20},
    [KVT_TYPE_Q5_0] = {"Q5_0", 32, 22},
    [KVT_TYPE_Q5_1] = {"Q5_1", 32, 24},
    [KVT_TYPE_Q8_0] = {"Q8_0", 32, 34},
    [KVT_TYPE_Q8_1] = {"Q8_1", 32, 36},
    [KVT_TYPE_Q2_K] = {"Q2_K", 256, 84},
    [KVT_TYPE_Q3_K] = {"Q3_K", 256, 110},
    [KVT_TYPE_Q4_K] = {"Q4_K", 256, 144},
    [KVT_TYPE_Q5_K] = {"Q5_K", 256, 176},
    [KVT_TYPE_Q6_K] = {"Q6_K", 256, 210},
    [KVT_TYPE_Q8_K] = {"Q8_K", 256, 292},
    [KVT_TYPE_IQ2_XXS] = {"IQ2_XXS", 256, 66},
    [KVT_TYPE_IQ2_XS] = {"IQ2_XS", 256, 74},
    [KVT_TYPE_IQ3_XXS] = {"IQ3_XXS", 256, 98},
    [KVT_TYPE_IQ1_S] = {"IQ1_S", 256, 50},
    [KVT_TYPE_IQ4_NL] = {"IQ4_NL", 32, 18},
    [KVT_TYPE_IQ3_S] = {"IQ3_S", 256, 110},
    [KVT_TYPE_IQ2_S] = {"IQ2_S", 256, 82},
    [KVT_TYPE_IQ4_XS] = {"IQ4_XS", 256, 136},
    [KVT_TYPE_I8] = {"I8", 1, 1},
    [KVT_TYPE_I16] = {"I16", 1, 2},
    [KVT_TYPE_I32] = {"I32", 1, 4},
    [KVT_TYPE_I64] = {"I64", 1, 8},
    [KVT_TYPE_F64] = {"F64", 1, 8},
    [KVT_TYPE_IQ1_M] = {"IQ1_M", 256, 56},
    [KVT_TYPE_BF16] = {"BF16", 1, 2},
    [KVT_TYPE_TQ1_0] = {"TQ1_0", 256, 54},
    [KVT_TYPE_TQ2_0] = {"TQ2_0", 256, 66},
};

const char *kvt_ggml_type_name(uint32_t type) { return type < KVT_TYPE_COUNT ? type_table[type].name : NULL; }
uint32_t kvt_ggml_block_elems(uint32_t type) {
    return type < KVT_TYPE_COUNT && type_table[type].name ? type_table[type].block_elems : 0;
}
uint32_t kvt_ggml_block_bytes(uint32_t type) {
    return type < KVT_TYPE_COUNT && type_table[type].name ? type_table[type].block_bytes : 0;
}
uint64_t kvt_ggml_row_bytes(uint32_t type, uint64_t n) {
    uint32_t be = kvt_ggml_block_elems(type);
    if (!be || n % be) return 0;
    uint64_t bytes;
    if (kvt_mul_ovf(n / be, kvt_ggml_block_bytes(type), &bytes)) return 0;
    return bytes;
}

static const uint32_t vtype_size[KVT_GGUF_VTYPE_COUNT] = {
    [KVT_GGUF_U8] = 1,  [KVT_GGUF_I8] = 1,  [KVT_GGUF_U16] = 2, [KVT_GGUF_I16] = 2,
    [KVT_GGUF_U32] = 4, [KVT_GGUF_I32] = 4, [KVT_GGUF_F32] = 4, [KVT_GGUF_BOOL] = 1,
    [KVT_GGUF_U64] = 8, [KVT_GGUF_I64] = 8, [KVT_GGUF_F64] = 8,
};

static const char *vtype_name(uint32_t t) {
    static const char *const names[KVT_GGUF_VTYPE_COUNT] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                                            "bool", "string", "array", "u64", "i64", "f64"};
    return t < KVT_GGUF_VTYPE_COUNT ? names[t] : "?";
}

/* ---- bounds-checked cursor ---------------------------------------------- */

typedef struct {
    const uint8_t *p;
    size_t size, off;
} cursor;

static int cur_need(cursor *c, uint64_t n, const char *what) {
    if (n > c->size - c->off)
        return kvt_fail(KVT_EFORMAT, "truncated at byte %zu: %s needs %llu bytes, %zu left", c->off, what,
                        (unsigned long long)n, c->size - c->off);
    return 0;
}

static int cur_u32(cursor *c, uint32_t *v, const char *what) {
    int rc = cur_need(c, 4, what);
    if (rc) return rc;
    memcpy(v, c->p + c->off, 4);
    c->off += 4;
    return 0;
}

static int cur_u64(cursor *c, uint64_t *v, const char *what) {
    int rc = cur_need(c, 8, what);
    if (rc) return rc;
    memcpy(v, c->p + c->off, 8);
    c->off += 8;
    return 0;
}

/* A GGUF string: sets *s to its first byte (in the file) and *len. */
static int cur_str(cursor *c, const char **s, uint64_t *len, const char *what) {
    int rc = cur_u64(c, len, what);
    if (rc) return rc;
    if ((rc = cur_need(c, *len, what))) return rc;
    *s = (const char *)c->p + c->off;
    c->off += *len;
    return 0;
}

/* ---- parsing ------------------------------------------------------------- */

static int parse_kv(cursor *c, kvt_gguf_kv *kv, uint64_t idx) {
    const char *key;
    uint64_t key_len;
    int rc = cur_str(c, &key, &key_len, "metadata key");
    if (rc) return kvt_fail_prefix(rc, "metadata #%llu: ", (unsigned long long)idx);
    if (key_len == 0 || key_len > GGUF_MAX_KEY_LEN)
        return kvt_fail(KVT_EFORMAT, "metadata #%llu: key length %llu out of range", (unsigned long long)idx,
                        (unsigned long long)key_len);
    if (memchr(key, 0, key_len))
        return kvt_fail(KVT_EFORMAT, "metadata #%llu: key contains a NUL byte", (unsigned long long)idx);
    kv->key = kvt_xstrndup(key, key_len);
    if ((rc = cur_u32(c, &kv->type, "value type"))) return kvt_fail_prefix(rc, "metadata '%s': ", kv->key);
    if (kv->type >= KVT_GGUF_VTYPE_COUNT)
        return kvt_fail(KVT_EFORMAT, "metadata '%s': unknown value type %u", kv->key, kv->type);
    if (kv->type == KVT_GGUF_STRING) {
        const char *s;
        if ((rc = cur_str(c, &s, &kv->str_len, "string value"))) return kvt_fail_prefix(rc, "metadata '%s': ", kv->key);
        kv->str = kvt_xstrndup(s, kv->str_len);
        return 0;
    }
    if (kv->type != KVT_GGUF_ARRAY) {
        uint32_t sz = vtype_size[kv->type];
        if ((rc = cur_need(c, sz, "value"))) return kvt_fail_prefix(rc, "metadata '%s': ", kv->key);
        kv->val = c->p + c->off;
        c->off += sz;
        return 0;
    }
    if ((rc = cur_u32(c, &kv->arr_type, "array element type")) || (rc = cur_u64(c, &kv->arr_n, "array length")))
        return kvt_fail_prefix(rc, "metadata '%s': ", kv->key);
    if (kv->arr_type == KVT_GGUF_ARRAY)
        return kvt_fail(KVT_EUNSUPPORTED, "metadata '%s': nested arrays are not supported", kv->key);
    if (kv->arr_type >= KVT_GGUF_VTYPE_COUNT)
        return kvt_fail(KVT_EFORMAT, "metadata '%s': unknown array element type %u", kv->key, kv->arr_type);
    kv->arr = c->p + c->off;
    if (kv->arr_type == KVT_GGUF_STRING) {
        /* each element takes at least its 8-byte length: bounds the count before allocating */
        if (kv->arr_n > (c->size - c->off) / 8)
            return kvt_fail(KVT_EFORMAT, "metadata '%s': array of %llu strings cannot fit in the file", kv->key,
                            (unsigned long long)kv->arr_n);
        kv->arr_str_off = kvt_xmalloc((kv->arr_n ? kv->arr_n : 1) * sizeof(uint64_t));
        for (uint64_t i = 0; i < kv->arr_n; i++) {
            kv->arr_str_off[i] = c->off - (size_t)(kv->arr - c->p);
            const char *s;
            uint64_t len;
            if ((rc = cur_str(c, &s, &len, "array string")))
                return kvt_fail_prefix(rc, "metadata '%s'[%llu]: ", kv->key, (unsigned long long)i);
        }
        return 0;
    }
    uint64_t bytes;
    if (kvt_mul_ovf(kv->arr_n, vtype_size[kv->arr_type], &bytes))
        return kvt_fail(KVT_EFORMAT, "metadata '%s': array length %llu overflows", kv->key,
                        (unsigned long long)kv->arr_n);
    if ((rc = cur_need(c, bytes, "array data"))) return kvt_fail_prefix(rc, "metadata '%s': ", kv->key);
    c->off += bytes;
    return 0;
}

static int parse_tensor_info(cursor *c, kvt_gguf_tensor *t, uint64_t idx) {
    const char *name;
    uint64_t name_len;
    int rc = cur_str(c, &name, &name_len, "tensor name");
    if (rc) return kvt_fail_prefix(rc, "tensor #%llu: ", (unsigned long long)idx);
    if (name_len == 0 || name_len > GGUF_MAX_KEY_LEN || memchr(name, 0, name_len))
        return kvt_fail(KVT_EFORMAT, "tensor #%llu: invalid name", (unsigned long long)idx);
    t->name = kvt_xstrndup(name, name_len);
    if ((rc = cur_u32(c, &t->n_dims, "dimension count"))) return kvt_fail_prefix(rc, "tensor %s: ", t->name);
    if (t->n_dims < 1 || t->n_dims > KVT_GGUF_MAX_DIMS)
        return kvt_fail(KVT_EFORMAT, "tensor %s: %u dimensions (1..%d allowed)", t->name, t->n_dims, KVT_GGUF_MAX_DIMS);
    uint64_t nelem = 1;
    for (uint32_t d = 0; d < KVT_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        if ((rc = cur_u64(c, &t->ne[d], "dimension"))) return kvt_fail_prefix(rc, "tensor %s: ", t->name);
        if (t->ne[d] == 0 || t->ne[d] > INT64_MAX || kvt_mul_ovf(nelem, t->ne[d], &nelem) || nelem > INT64_MAX)
            return kvt_fail(KVT_EFORMAT, "tensor %s: dimension %u = %llu is invalid", t->name, d,
                            (unsigned long long)t->ne[d]);
    }
    if ((rc = cur_u32(c, &t->type, "type")) || (rc = cur_u64(c, &t->offset, "offset")))
        return kvt_fail_prefix(rc, "tensor %s: ", t->name);
    if (!kvt_ggml_type_name(t->type)) return kvt_fail(KVT_EFORMAT, "tensor %s: unknown type id %u", t->name, t->type);
    uint64_t row = kvt_ggml_row_bytes(t->type, t->ne[0]);
    if (!row)
        return kvt_fail(KVT_EFORMAT, "tensor %s: row of %llu elements is not a whole number of %s blocks", t->name,
                        (unsigned long long)t->ne[0], kvt_ggml_type_name(t->type));
    if (kvt_mul_ovf(row, nelem / t->ne[0], &t->nbytes))
        return kvt_fail(KVT_EFORMAT, "tensor %s: size overflows", t->name);
    return 0;
}

static int cmp_tensor_offset(const void *a, const void *b) {
    const kvt_gguf_tensor *x = *(const kvt_gguf_tensor *const *)a, *y = *(const kvt_gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int cmp_tensor_name(const void *a, const void *b) {
    const kvt_gguf_tensor *x = *(const kvt_gguf_tensor *const *)a, *y = *(const kvt_gguf_tensor *const *)b;
    return strcmp(x->name, y->name);
}

/* Tensor data must lie inside the file, aligned, without overlaps or duplicate names. */
static int check_tensors(kvt_gguf *g) {
    if (!g->n_tensors) return 0;
    uint64_t data_size = g->size - g->data_offset;
    kvt_gguf_tensor **order = kvt_xmalloc(g->n_tensors * sizeof *order);
    int rc = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) order[i] = &g->tensors[i];
    qsort(order, g->n_tensors, sizeof *order, cmp_tensor_name);
    for (uint64_t i = 1; i < g->n_tensors && !rc; i++)
        if (!strcmp(order[i - 1]->name, order[i]->name))
            rc = kvt_fail(KVT_EFORMAT, "tensor %s appears twice", order[i]->name);
    qsort(order, g->n_tensors, sizeof *order, cmp_tensor_offset);
    for (uint64_t i = 0; i < g->n_tensors && !rc; i++) {
        kvt_gguf_tensor *t = order[i];
        uint64_t end;
        if (t->offset % g->alignment)
            rc = kvt_fail(KVT_EFORMAT, "tensor %s: offset %llu is not aligned to %llu", t->name,
                          (unsigned long long)t->offset, (unsigned long long)g->alignment);
        else if (kvt_add_ovf(t->offset, t->nbytes, &end) || end > data_size)
            rc = kvt_fail(KVT_EFORMAT, "tensor %s: data [%llu, +%llu) runs past the end of the file (%llu data bytes)",
                          t->name, (unsigned long long)t->offset, (unsigned long long)t->nbytes,
                          (unsigned long long)data_size);
        else if (i && order[i - 1]->offset + order[i - 1]->nbytes > t->offset)
            rc = kvt_fail(KVT_EFORMAT, "tensors %s and %s overlap", order[i - 1]->name, t->name);
        else t->data = g->base + g->data_offset + t->offset;
    }
    free(order);
    return rc;
}

static int parse(kvt_gguf *g) {
    cursor c = {g->base, g->size, 0};
    uint32_t magic;
    int rc;
    if ((rc = cur_u32(&c, &magic, "magic"))) return rc;
    if (magic != GGUF_MAGIC) return kvt_fail(KVT_EFORMAT, "not a GGUF file (magic %08x)", magic);
    if ((rc = cur_u32(&c, &g->version, "version"))) return rc;
    if (g->version < GGUF_MIN_VERSION || g->version > GGUF_MAX_VERSION)
        return kvt_fail(KVT_EUNSUPPORTED, "GGUF version %u is not supported (%d..%d are)", g->version, GGUF_MIN_VERSION,
                        GGUF_MAX_VERSION);
    if ((rc = cur_u64(&c, &g->n_tensors, "tensor count")) || (rc = cur_u64(&c, &g->n_kv, "metadata count"))) return rc;
    /* every kv needs >= 12 bytes (key length + type), every tensor >= 28 */
    if (g->n_kv > g->size / 12 || g->n_tensors > g->size / 28)
        return kvt_fail(KVT_EFORMAT, "counts (%llu metadata, %llu tensors) cannot fit in a %zu-byte file",
                        (unsigned long long)g->n_kv, (unsigned long long)g->n_tensors, g->size);
    g->kv = kvt_xcalloc(g->n_kv ? g->n_kv : 1, sizeof *g->kv);
    g->tensors = kvt_xcalloc(g->n_tensors ? g->n_tensors : 1, sizeof *g->tensors);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        if ((rc = parse_kv(&c, &g->kv[i], i))) {
            g->n_kv = i + 1; /* free what was allocated */
            return rc;
        }
        for (uint64_t j = 0; j < i; j++)
            if (!strcmp(g->kv[j].key, g->kv[i].key)) {
                g->n_kv = i + 1;
                return kvt_fail(KVT_EFORMAT, "metadata key '%s' appears twice", g->kv[i].key);
            }
    }
    g->alignment = KVT_GGUF_DEFAULT_ALIGNMENT;
    const kvt_gguf_kv *al = kvt_gguf_find(g, "general.alignment");
    if (al) {
        int64_t a;
        if (kvt_gguf_get_int(g, "general.alignment", &a) || a <= 0 || a > GGUF_MAX_ALIGNMENT || (a & (a - 1)))
            return kvt_fail(KVT_EFORMAT, "general.alignment must be a power of two up to %u", GGUF_MAX_ALIGNMENT);
        g->alignment = (uint64_t)a;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if ((rc = parse_tensor_info(&c, &g->tensors[i], i))) {
            g->n_tensors = i + 1;
            return rc;
        }
    uint64_t data_off = (c.off + g->alignment - 1) / g->alignment * g->alignment;
    if (g->n_tensors && data_off > g->size)
        return kvt_fail(KVT_EFORMAT, "truncated: the data section would start at %llu, past the end (%zu)",
                        (unsigned long long)data_off, g->size);
    g->data_offset = data_off > g->size ? g->size : data_off;
    return check_tensors(g);
}

static int open_common(kvt_gguf *g, kvt_gguf **out) {
    int rc = parse(g);
    if (rc) {
        kvt_gguf_close(g);
        return rc;
    }
    *out = g;
    return 0;
}

int kvt_gguf_open_mem(const void *data, size_t size, kvt_gguf **out) {
    *out = NULL;
    kvt_gguf *g = kvt_xcalloc(1, sizeof *g);
    g->base = data;
    g->size = size;
    return open_common(g, out);
}

int kvt_gguf_open(const char *path, kvt_gguf **out) {
    *out = NULL;
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, for ever */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        return kvt_fail(-e, "%s: cannot open: %s", path, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return kvt_fail(KVT_EFORMAT, "%s: not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return kvt_fail(KVT_EFORMAT, "%s: empty file", path);
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        int e = errno;
        return kvt_fail(-e, "%s: mmap failed: %s", path, strerror(e));
    }
    kvt_gguf *g = kvt_xcalloc(1, sizeof *g);
    g->base = m;
    g->size = (size_t)st.st_size;
    g->mapped = 1;
    int rc = open_common(g, out);
    if (rc) return kvt_fail_prefix(rc, "%s: ", path);
    return 0;
}

void kvt_gguf_close(kvt_gguf *g) {
    if (!g) return;
    for (uint64_t i = 0; g->kv && i < g->n_kv; i++) {
        free(g->kv[i].key);
        free(g->kv[i].str);
        free(g->kv[i].arr_str_off);
    }
    for (uint64_t i = 0; g->tensors && i < g->n_tensors; i++) free(g->tensors[i].name);
    free(g->kv);
    free(g->tensors);
    if (g->mapped) munmap((void *)g->base, g->size);
    free(g);
}

/* ---- accessors ------------------------------------------------------------ */

const kvt_gguf_kv *kvt_gguf_find(const kvt_gguf *g, const char *key) {
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (g->kv[i].key && !strcmp(g->kv[i].key, key)) return &g->kv[i];
    return NULL;
}

/* Reads a numeric value of type t at p as int64 (ok=0) or fails for non-integers. */
static int read_int(uint32_t t, const uint8_t *p, int64_t *out) {
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        uint64_t u64;
        int64_t i64;
    } v;
    memcpy(&v, p, t < KVT_GGUF_VTYPE_COUNT && vtype_size[t] ? vtype_size[t] : 0);
    switch (t) {
    case KVT_GGUF_U8: *out = v.u8; return 0;
    case KVT_GGUF_BOOL: *out = v.u8 != 0; return 0;
    case KVT_GGUF_I8: *out = v.i8; return 0;
    case KVT_GGUF_U16: *out = v.u16; return 0;
    case KVT_GGUF_I16: *out = v.i16; return 0;
    case KVT_GGUF_U32: *out = v.u32; return 0;
    case KVT_GGUF_I32: *out = v.i32; return 0;
    case KVT_GGUF_I64: *out = v.i64; return 0;
    case KVT_GGUF_U64:
        if (v.u64 > INT64_MAX) return KVT_ETYPE;
        *out = (int64_t)v.u64;
        return 0;
    default: return KVT_ETYPE;
    }
}

static int read_float(uint32_t t, const uint8_t *p, double *out) {
    if (t == KVT_GGUF_F32) {
        float f;
        memcpy(&f, p, 4);
        *out = f;
        return 0;
    }
    if (t == KVT_GGUF_F64) {
        memcpy(out, p, 8);
        return 0;
    }
    int64_t i;
    int rc = read_int(t, p, &i);
    if (!rc) *out = (double)i;
    return rc;
}

int kvt_gguf_get_int(const kvt_gguf *g, const char *key, int64_t *out) {
    const kvt_gguf_kv *kv = kvt_gguf_find(g, key);
    if (!kv) return kvt_fail(KVT_ENOTFOUND, "metadata '%s' is missing", key);
    if (!kv->val || read_int(kv->type, kv->val, out))
        return kvt_fail(KVT_ETYPE, "metadata '%s' is a %s, expected an integer", key, vtype_name(kv->type));
    return 0;
}

int kvt_gguf_get_float(const kvt_gguf *g, const char *key, double *out) {
    const kvt_gguf_kv *kv = kvt_gguf_find(g, key);
    if (!kv) return kvt_fail(KVT_ENOTFOUND, "metadata '%s' is missing", key);
    if (!kv->val || read_float(kv->type, kv->val, out))
        return kvt_fail(KVT_ETYPE, "metadata '%s' is a %s, expected a number", key, vtype_name(kv->type));
    return 0;
}

int kvt_gguf_get_str(const kvt_gguf *g, const char *key, const char **out) {
    const kvt_gguf_kv *kv = kvt_gguf_find(g, key);
    if (!kv) return kvt_fail(KVT_ENOTFOUND, "metadata '%s' is missing", key);
    if (kv->type != KVT_GGUF_STRING)
        return kvt_fail(KVT_ETYPE, "metadata '%s' is a %s, expected a string", key, vtype_name(kv->type));
    *out = kv->str;
    return 0;
}

int kvt_gguf_get_arr(const kvt_gguf *g, const char *key, const kvt_gguf_kv **out) {
    const kvt_gguf_kv *kv = kvt_gguf_find(g, key);
    if (!kv) return kvt_fail(KVT_ENOTFOUND, "metadata '%s' is missing", key);
    if (kv->type != KVT_GGUF_ARRAY)
        return kvt_fail(KVT_ETYPE, "metadata '%s' is a %s, expected an array", key, vtype_name(kv->type));
    *out = kv;
    return 0;
}

int64_t kvt_gguf_arr_int(const kvt_gguf_kv *kv, uint64_t i) {
    int64_t v = 0;
    double d;
    if (read_int(kv->arr_type, kv->arr + i * vtype_size[kv->arr_type], &v) &&
        !read_float(kv->arr_type, kv->arr + i * vtype_size[kv->arr_type], &d)) {
        /* a float element: saturate, since converting an out-of-range or NaN double is undefined */
        if (d != d) v = 0;
        else if (d >= 0x1p63) v = INT64_MAX;
        else if (d < -0x1p63) v = INT64_MIN;
        else v = (int64_t)d;
    }
    return v;
}

double kvt_gguf_arr_float(const kvt_gguf_kv *kv, uint64_t i) {
    double d = 0;
    read_float(kv->arr_type, kv->arr + i * vtype_size[kv->arr_type], &d);
    return d;
}

const char *kvt_gguf_arr_str(const kvt_gguf_kv *kv, uint64_t i, uint64_t *len) {
    const uint8_t *p = kv->arr + kv->arr_str_off[i];
    memcpy(len, p, 8);
    return (const char *)p + 8;
}

const kvt_gguf_tensor *kvt_gguf_tensor_find(const kvt_gguf *g, const char *name) {
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (!strcmp(g->tensors[i].name, name)) return &g->tensors[i];
    return NULL;
}

/* ---- writer --------------------------------------------------------------- */

typedef struct {
    uint8_t *p;
    size_t len, cap;
} bytebuf;

static void bb_put(bytebuf *b, const void *src, size_t n) {
    if (b->len + n > b->cap) {
        b->cap = KVT_MAX(b->cap * 2, b->len + n + 256);
        b->p = kvt_xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}
static void bb_u32(bytebuf *b, uint32_t v) { bb_put(b, &v, 4); }
static void bb_u64(bytebuf *b, uint64_t v) { bb_put(b, &v, 8); }
static void bb_str(bytebuf *b, const char *s, uint64_t n) {
    bb_u64(b, n);
    bb_put(b, s, n);
}

typedef struct {
    char *name;
    uint32_t type, n_dims;
    uint64_t ne[KVT_GGUF_MAX_DIMS];
    uint64_t nbytes, offset;
    kvt_gguf_fill_fn fill;
    void *ctx;
} w_tensor;

struct kvt_gguf_writer {
    bytebuf kv; /* serialized metadata entries */
    uint64_t n_kv;
    w_tensor *t;
    uint64_t n_t, cap_t;
    int failed; /* a declared tensor had an invalid shape */
};

kvt_gguf_writer *kvt_gguf_writer_new(void) { return kvt_xcalloc(1, sizeof(kvt_gguf_writer)); }

void kvt_gguf_writer_free(kvt_gguf_writer *w) {
    if (!w) return;
    for (uint64_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->t);
    free(w->kv.p);
    free(w);
}

static void w_key(kvt_gguf_writer *w, const char *key, uint32_t type) {
    bb_str(&w->kv, key, strlen(key));
    bb_u32(&w->kv, type);
    w->n_kv++;
}

void kvt_gguf_w_str(kvt_gguf_writer *w, const char *key, const char *val) {
    w_key(w, key, KVT_GGUF_STRING);
    bb_str(&w->kv, val, strlen(val));
}
void kvt_gguf_w_u32(kvt_gguf_writer *w, const char *key, uint32_t val) {
    w_key(w, key, KVT_GGUF_U32);
    bb_u32(&w->kv, val);
}
void kvt_gguf_w_i32(kvt_gguf_writer *w, const char *key, int32_t val) {
    w_key(w, key, KVT_GGUF_I32);
    bb_put(&w->kv, &val, 4);
}
void kvt_gguf_w_f32(kvt_gguf_writer *w, const char *key, float val) {
    w_key(w, key, KVT_GGUF_F32);
    bb_put(&w->kv, &val, 4);
}
void kvt_gguf_w_bool(kvt_gguf_writer *w, const char *key, int val) {
    uint8_t b = val != 0;
    w_key(w, key, KVT_GGUF_BOOL);
    bb_put(&w->kv, &b, 1);
}

void kvt_gguf_w_arr(kvt_gguf_writer *w, const char *key, uint32_t vtype, const void *elems, uint64_t n) {
    w_key(w, key, KVT_GGUF_ARRAY);
    bb_u32(&w->kv, vtype);
    bb_u64(&w->kv, n);
    bb_put(&w->kv, elems, n * vtype_size[vtype]);
}

void kvt_gguf_w_arr_str(kvt_gguf_writer *w, const char *key, const char *const *strs, uint64_t n) {
    w_key(w, key, KVT_GGUF_ARRAY);
    bb_u32(&w->kv, KVT_GGUF_STRING);
    bb_u64(&w->kv, n);
    for (uint64_t i = 0; i < n; i++) bb_str(&w->kv, strs[i], strlen(strs[i]));
}

void kvt_gguf_w_copy(kvt_gguf_writer *w, const kvt_gguf_kv *kv) {
    w_key(w, kv->key, kv->type);
    if (kv->type == KVT_GGUF_STRING) {
        bb_str(&w->kv, kv->str, kv->str_len);
    } else if (kv->type != KVT_GGUF_ARRAY) {
        bb_put(&w->kv, kv->val, vtype_size[kv->type]);
    } else {
        bb_u32(&w->kv, kv->arr_type);
        bb_u64(&w->kv, kv->arr_n);
        if (kv->arr_type == KVT_GGUF_STRING) {
            for (uint64_t i = 0; i < kv->arr_n; i++) {
                uint64_t len;
                const char *s = kvt_gguf_arr_str(kv, i, &len);
                bb_str(&w->kv, s, len);
            }
        } else {
            bb_put(&w->kv, kv->arr, kv->arr_n * vtype_size[kv->arr_type]);
        }
    }
}

void kvt_gguf_w_tensor(kvt_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const uint64_t *ne,
                       kvt_gguf_fill_fn fill, void *ctx) {
    if (w->n_t == w->cap_t) {
        w->cap_t = w->cap_t ? w->cap_t * 2 : 64;
        w->t = kvt_xrealloc(w->t, w->cap_t * sizeof *w->t);
    }
    w_tensor *t = &w->t[w->n_t++];
    memset(t, 0, sizeof *t);
    t->name = kvt_xstrdup(name);
    t->type = type;
    t->n_dims = n_dims;
    t->fill = fill;
    t->ctx = ctx;
    uint64_t rows = 1;
    for (uint32_t d = 0; d < KVT_GGUF_MAX_DIMS; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
    for (uint32_t d = 1; d < n_dims; d++) rows *= t->ne[d];
    uint64_t row = kvt_ggml_row_bytes(type, t->ne[0]);
    if (!row || n_dims < 1 || n_dims > KVT_GGUF_MAX_DIMS) w->failed = 1;
    t->nbytes = row * rows;
}

/* Makes a rename in path's directory durable (best effort: the file itself is
 * already synced). */
static void sync_parent_dir(const char *path) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir) slash[1] = 0;
    else if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    fsync(fd);
    close(fd);
}

int kvt_gguf_write(kvt_gguf_writer *w, const char *path) {
    if (w->failed) return kvt_fail(KVT_EARG, "%s: a tensor has a shape its type cannot hold", path);
    const uint64_t align = KVT_GGUF_DEFAULT_ALIGNMENT;
    bytebuf head = {0};
    bb_u32(&head, GGUF_MAGIC);
    bb_u32(&head, GGUF_MAX_VERSION);
    bb_u64(&head, w->n_t);
    bb_u64(&head, w->n_kv);
    bb_put(&head, w->kv.p, w->kv.len);
    uint64_t off = 0;
    for (uint64_t i = 0; i < w->n_t; i++) {
        w_tensor *t = &w->t[i];
        t->offset = off;
        bb_str(&head, t->name, strlen(t->name));
        bb_u32(&head, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) bb_u64(&head, t->ne[d]);
        bb_u32(&head, t->type);
        bb_u64(&head, t->offset);
        off += (t->nbytes + align - 1) / align * align;
    }
    static const uint8_t zeros[KVT_GGUF_DEFAULT_ALIGNMENT];
    bb_put(&head, zeros, (align - head.len % align) % align);

    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    /* exclusive and not through a link: a planted symlink cannot redirect the write */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        free(head.p);
        return kvt_fail(-e, "%s: cannot create: %s", tmp, strerror(e));
    }
    int rc = kvt_write_all(fd, head.p, head.len);
    free(head.p);
    uint8_t *buf = NULL;
    uint64_t buf_cap = 0;
    for (uint64_t i = 0; i < w->n_t && !rc; i++) {
        w_tensor *t = &w->t[i];
        uint64_t padded = (t->nbytes + align - 1) / align * align;
        if (padded > buf_cap) {
            buf_cap = padded;
            buf = kvt_xrealloc(buf, buf_cap);
        }
        memset(buf, 0, padded);
        if (t->fill && (rc = t->fill(t->ctx, t->name, buf, t->nbytes))) break;
        rc = kvt_write_all(fd, buf, padded);
    }
    free(buf);
    const int fill_failed = rc >= KVT_ERR_FIRST && rc <= KVT_ERR_LAST; /* write_all gives -errno */
    if (!rc && fsync(fd) < 0) rc = -errno;
    if (close(fd) < 0 && !rc) rc = -errno;
    if (!rc && rename(tmp, path) < 0) rc = -errno;
    if (rc) {
        unlink(tmp);
        /* a fill callback's own error keeps its detail */
        if (fill_failed) return kvt_fail_prefix(rc, "%s: not written: ", path);
        return kvt_fail(rc, "%s: write failed: %s", path, kvt_strerror(rc));
    }
    sync_parent_dir(path);
    return 0;
}
