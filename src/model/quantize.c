// SPDX-License-Identifier: MIT
/* `kvtier quantize`: the type tables (file types by name, row quantizers by tensor
 * type), the per-tensor plan that follows llama-quantize, and the rewrite
 * through the GGUF writer with rows quantized on a thread pool. */
#include "quantize.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "common.h"
#include "gguf.h"
#include "ops.h"
#include "quant_k.h"
#include "quant_legacy.h"
#include "quant_mix.h"
#include "threadpool.h"

/* llama.cpp's llama_ftype values (general.file_type). */
enum {
    FTYPE_ALL_F32 = 0,
    FTYPE_F16 = 1,
    FTYPE_Q4_0 = 2,
    FTYPE_Q4_1 = 3,
    FTYPE_Q8_0 = 7,
    FTYPE_Q5_0 = 8,
    FTYPE_Q5_1 = 9,
    FTYPE_Q2_K = 10,
    FTYPE_Q3_K_S = 11,
    FTYPE_Q3_K_M = 12,
    FTYPE_Q3_K_L = 13,
    FTYPE_Q4_K_S = 14,
    FTYPE_Q4_K_M = 15,
    FTYPE_Q5_K_S = 16,
    FTYPE_Q5_K_M = 17,
    FTYPE_Q6_K = 18,
    FTYPE_IQ4_NL = 25,
    FTYPE_IQ4_XS = 30,
    FTYPE_BF16 = 32,
};
#define QUANT_VERSION 2 /* general.quantization_version: ggml's GGML_QNT_VERSION */
#define KEY_QVERSION "general.quantization_version"
#define KEY_FTYPE "general.file_type"
#define KEY_ALIGNMENT "general.alignment"
#define LAYER_PREFIX "blk."

/* ---- the tables ------------------------------------------------------------- */

static int row_f32(uint32_t type, const float *x, uint8_t *out, int64_t n) {
    (void)type;
    memcpy(out, x, (size_t)n * sizeof(float));
    return 0;
}
/* F16 or BF16, rounded to nearest even as ggml does */
static int row_half(uint32_t type, const float *x, uint8_t *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = type == KVT_TYPE_F16 ? kvt_f32_to_f16(x[i]) : kvt_f32_to_bf16(x[i]);
        memcpy(out + 2 * i, &h, sizeof h);
    }
    return 0;
}
static int row_k(uint32_t type, const float *x, uint8_t *out, int64_t n) {
    return kvt_qk_quantize_row(type, x, n, out);
}

/* Row quantizers by tensor type (block sizes come from gguf's type table). */
static const struct {
    uint32_t type;
    kvt_quant_row_fn fn;
} kernels[] = {
    {KVT_TYPE_F32, row_f32},
    {KVT_TYPE_F16, row_half},
    {KVT_TYPE_BF16, row_half},
    {KVT_TYPE_Q8_0, kvt_ql_quantize_row},
    {KVT_TYPE_Q4_0, kvt_ql_quantize_row},
    {KVT_TYPE_Q4_1, kvt_ql_quantize_row},
    {KVT_TYPE_Q5_0, kvt_ql_quantize_row},
    {KVT_TYPE_Q5_1, kvt_ql_quantize_row},
    {KVT_TYPE_IQ4_NL, kvt_ql_quantize_row},
    {KVT_TYPE_Q2_K, row_k},
    {KVT_TYPE_Q3_K, row_k},
    {KVT_TYPE_Q4_K, row_k},
    {KVT_TYPE_Q5_K, row_k},
    {KVT_TYPE_Q6_K, row_k},
    {KVT_TYPE_IQ4_XS, row_k},
};

static kvt_quant_row_fn kernel_for(uint32_t type) {
    for (size_t i = 0; i < KVT_ARRAY_LEN(kernels); i++)
        if (kernels[i].type == type) return kernels[i].fn;
    return NULL;
}

/* The K-quant mixes' rule: their per-layer recipe (quant_mix.h), fallback included. */
static uint32_t k_rule(const kvt_quant_ftype *ft, const char *name, int64_t cols, const kvt_quant_model_facts *m) {
    const kvt_quant_model_info info = {m->n_layer, m->n_gqa, m->has_output};
    return kvt_quant_mix_type(kvt_quant_mix_by_name(ft->name), name, cols, &info);
}

/* The file types by name. llama.cpp puts Q6_K in output.weight for every
 * quantized type but Q8_0 (Q8_0 when its rows are not a multiple of 256); the
 * K-quant mixes follow their per-layer recipe. IQ4_XS rows that are not a
 * multiple of 256 fall back to IQ4_NL, as llama-quantize's do. */
static const kvt_quant_ftype ftypes[] = {
    {"f32", KVT_TYPE_F32, FTYPE_ALL_F32, KVT_TYPE_F32, NULL},
    {"f16", KVT_TYPE_F16, FTYPE_F16, KVT_TYPE_F16, NULL},
    {"bf16", KVT_TYPE_BF16, FTYPE_BF16, KVT_TYPE_BF16, NULL},
    {"q8_0", KVT_TYPE_Q8_0, FTYPE_Q8_0, KVT_TYPE_Q8_0, NULL},
    {"q4_0", KVT_TYPE_Q4_0, FTYPE_Q4_0, KVT_TYPE_Q6_K, NULL},
    {"q4_1", KVT_TYPE_Q4_1, FTYPE_Q4_1, KVT_TYPE_Q6_K, NULL},
    {"q5_0", KVT_TYPE_Q5_0, FTYPE_Q5_0, KVT_TYPE_Q6_K, NULL},
    {"q5_1", KVT_TYPE_Q5_1, FTYPE_Q5_1, KVT_TYPE_Q6_K, NULL},
    {"iq4_nl", KVT_TYPE_IQ4_NL, FTYPE_IQ4_NL, KVT_TYPE_Q6_K, NULL},
    {"q2_k", KVT_TYPE_Q2_K, FTYPE_Q2_K, KVT_TYPE_Q6_K, k_rule},
    {"q3_k_s", KVT_TYPE_Q3_K, FTYPE_Q3_K_S, KVT_TYPE_Q6_K, k_rule},
    {"q3_k_m", KVT_TYPE_Q3_K, FTYPE_Q3_K_M, KVT_TYPE_Q6_K, k_rule},
    {"q3_k_l", KVT_TYPE_Q3_K, FTYPE_Q3_K_L, KVT_TYPE_Q6_K, k_rule},
    {"q4_k_s", KVT_TYPE_Q4_K, FTYPE_Q4_K_S, KVT_TYPE_Q6_K, k_rule},
    {"q4_k_m", KVT_TYPE_Q4_K, FTYPE_Q4_K_M, KVT_TYPE_Q6_K, k_rule},
    {"q5_k_s", KVT_TYPE_Q5_K, FTYPE_Q5_K_S, KVT_TYPE_Q6_K, k_rule},
    {"q5_k_m", KVT_TYPE_Q5_K, FTYPE_Q5_K_M, KVT_TYPE_Q6_K, k_rule},
    {"q6_k", KVT_TYPE_Q6_K, FTYPE_Q6_K, KVT_TYPE_Q6_K, k_rule},
    {"iq4_xs", KVT_TYPE_IQ4_XS, FTYPE_IQ4_XS, KVT_TYPE_Q6_K, NULL},
};

/* llama-quantize's short names for the _M mixes. */
static const char *const aliases[][2] = {{"q3_k", "q3_k_m"}, {"q4_k", "q4_k_m"}, {"q5_k", "q5_k_m"}};

const kvt_quant_ftype *kvt_quant_ftype_find(const char *name) {
    for (size_t i = 0; i < KVT_ARRAY_LEN(aliases); i++)
        if (!strcasecmp(name, aliases[i][0])) name = aliases[i][1];
    for (size_t i = 0; i < KVT_ARRAY_LEN(ftypes); i++)
        if (!strcasecmp(name, ftypes[i].name)) return &ftypes[i];
    return NULL;
}

void kvt_quant_ftype_names(char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = 0;
    for (size_t i = 0; i < KVT_ARRAY_LEN(ftypes) && used < cap; i++) {
        int k = snprintf(buf + used, cap - used, "%s%s", i ? ", " : "", ftypes[i].name);
        if (k < 0) break;
        used += (size_t)k;
    }
}

kvt_quantize_params kvt_quantize_default_params(void) {
    kvt_quantize_params p = {.threads = 1, .progress = NULL, .progress_ctx = NULL};
    return p;
}

/* ---- the plan ------------------------------------------------------------------ */

typedef struct quant_job quant_job;

typedef struct {
    const kvt_gguf_tensor *t;
    uint32_t to;
    int layer; /* N of "blk.N.", else -1 */
    quant_job *job;
} tensor_plan;

struct quant_job {
    const kvt_gguf *in;
    tensor_plan *plans;
    uint64_t n, done;
    kvt_pool *pool;
    kvt_quantize_params p;
    double t0;
    int rc;
    /* the tensor being converted, for the pool's workers */
    const tensor_plan *cur;
    uint8_t *out;
    uint64_t bad_row; /* 1 + a row holding a NaN or an infinity (atomic), 0: none */
};

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

static int layer_of(const char *name) {
    size_t pl = strlen(LAYER_PREFIX);
    if (strncmp(name, LAYER_PREFIX, pl)) return -1;
    char *end;
    long v = strtol(name + pl, &end, 10);
    return end != name + pl && *end == '.' && v >= 0 && v < INT32_MAX ? (int)v : -1;
}

/* llama-quantize's test: a weight matrix that is not one of the tensors it
 * keeps as they are. */
static int quantizable(const kvt_gguf_tensor *t) {
    static const char *const kept_parts[] = {"_norm.weight",
                                             "ffn_gate_inp.weight",
                                             "ssm_conv1d.weight",
                                             "time_mix_first.weight",
                                             "time_mix_w1.weight",
                                             "time_mix_w2.weight",
                                             "time_mix_decay_w1.weight",
                                             "time_mix_decay_w2.weight",
                                             "time_mix_lerp_fused.weight",
                                             "attn_rel_b.weight"};
    if (!ends_with(t->name, "weight") || t->n_dims < 2) return 0;
    if (!strcmp(t->name, "position_embd.weight") || !strcmp(t->name, "token_types.weight")) return 0;
    for (size_t i = 0; i < KVT_ARRAY_LEN(kept_parts); i++)
        if (strstr(t->name, kept_parts[i])) return 0;
    return 1;
}

/* Query heads per KV head, from "ARCH.attention.head_count[_kv]"; 1 if absent. */
static int32_t gqa_of(const kvt_gguf *g) {
    const char *arch;
    int64_t heads, kv_heads;
    char key[160];
    if (kvt_gguf_get_str(g, "general.architecture", &arch)) return 1;
    snprintf(key, sizeof key, "%s.attention.head_count", arch);
    if (kvt_gguf_get_int(g, key, &heads) || heads <= 0) return 1;
    snprintf(key, sizeof key, "%s.attention.head_count_kv", arch);
    if (kvt_gguf_get_int(g, key, &kv_heads) || kv_heads <= 0 || heads % kv_heads) return 1;
    return (int32_t)(heads / kv_heads);
}

static int plan_order(const void *a, const void *b) {
    const tensor_plan *x = a, *y = b;
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    return strcmp(x->t->name, y->t->name);
}

static int make_plan(quant_job *j, const kvt_quant_ftype *ft) {
    const kvt_gguf *g = j->in;
    kvt_quant_model_facts facts = {0, gqa_of(g), kvt_gguf_tensor_find(g, "output.weight") != NULL};
    for (uint64_t i = 0; i < g->n_tensors; i++)
        facts.n_layer = KVT_MAX(facts.n_layer, layer_of(g->tensors[i].name) + 1);
    j->plans = kvt_xcalloc(g->n_tensors ? g->n_tensors : 1, sizeof *j->plans);
    j->n = g->n_tensors;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kvt_gguf_tensor *t = &g->tensors[i];
        tensor_plan *pl = &j->plans[i];
        pl->t = t;
        pl->job = j;
        pl->layer = layer_of(t->name);
        pl->to = t->type;
        if (!quantizable(t)) continue;
        uint32_t to = kvt_quant_fallback(ft->type, (int64_t)t->ne[0]); /* IQ4_XS -> IQ4_NL -> F16 */
        if (ft->rule) to = ft->rule(ft, t->name, (int64_t)t->ne[0], &facts);
        else if (!strcmp(t->name, "output.weight") || (!facts.has_output && !strcmp(t->name, "token_embd.weight")))
            to = kvt_quant_fallback(ft->output_type, (int64_t)t->ne[0]); /* Q6_K -> Q8_0 -> F16 */
        if (t->ne[0] % kvt_ggml_block_elems(to)) continue;               /* keeps its type (quantize.h) */
        if (to != t->type && !kernel_for(to))
            return kvt_fail(KVT_EUNSUPPORTED, "tensor %s would be %s, which kvtier cannot write", t->name,
                            kvt_ggml_type_name(to));
        if (to != t->type && t->type != KVT_TYPE_F32 && t->type != KVT_TYPE_F16 && t->type != KVT_TYPE_BF16)
            return kvt_fail(KVT_EARG,
                            "tensor %s is %s: kvtier quantize reads F32, F16 or BF16 weights "
                            "(requantizing a quantized file is not supported)",
                            t->name, kvt_ggml_type_name(t->type));
        pl->to = to;
    }
    qsort(j->plans, j->n, sizeof *j->plans, plan_order);
    return 0;
}

/* ---- conversion -------------------------------------------------------------- */

static void convert_task(void *ctx, int ith, int nth) {
    quant_job *j = ctx;
    const kvt_gguf_tensor *t = j->cur->t;
    const int64_t cols = (int64_t)t->ne[0];
    const uint64_t rows = t->nbytes / kvt_ggml_row_bytes(t->type, t->ne[0]);
    const size_t in_row = kvt_ggml_row_bytes(t->type, t->ne[0]), out_row = kvt_ggml_row_bytes(j->cur->to, t->ne[0]);
    const kvt_wmat src = {.type = t->type, .rows = (int64_t)rows, .cols = cols, .data = t->data, .row_bytes = in_row};
    const kvt_quant_row_fn fn = kernel_for(j->cur->to);
    float *row = kvt_xmalloc((size_t)cols * sizeof(float));
    for (uint64_t r = rows * (uint64_t)ith / (uint64_t)nth; r < rows * (uint64_t)(ith + 1) / (uint64_t)nth; r++) {
        kvt_wmat_row_f32(&src, (int64_t)r, row);
        int64_t c = 0;
        while (c < cols && isfinite(row[c])) c++;
        if (c < cols) { /* llama-quantize refuses these too; the quantizers' casts would be undefined */
            __atomic_store_n(&j->bad_row, r + 1, __ATOMIC_RELAXED);
            continue;
        }
        fn(j->cur->to, row, j->out + r * out_row, cols);
    }
    free(row);
}

static int fill(void *ctx, const char *name, void *buf, uint64_t nbytes) {
    tensor_plan *pl = ctx;
    quant_job *j = pl->job;
    if (pl->to == pl->t->type) {
        memcpy(buf, pl->t->data, nbytes);
    } else {
        j->cur = pl;
        j->out = buf;
        kvt_pool_run(j->pool, convert_task, j);
        if (j->bad_row)
            return kvt_fail(KVT_EFORMAT, "tensor %s has a NaN or an infinity in row %llu", name,
                            (unsigned long long)(j->bad_row - 1));
    }
    j->done++;
    if (j->p.progress) {
        kvt_quant_progress pr = {j->done, j->n, name, pl->t->type, pl->to, pl->t->nbytes, nbytes, kvt_now() - j->t0};
        j->p.progress(j->p.progress_ctx, &pr);
    }
    return 0;
}

/* ---- the file ------------------------------------------------------------------- */

static int check_paths(const char *in_path, const char *out_path) {
    struct stat si, so;
    if (stat(in_path, &si) < 0) return 0; /* the reader says why */
    if (!strcmp(in_path, out_path) || (stat(out_path, &so) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino))
        return kvt_fail(KVT_EARG, "%s: input and output are the same file", out_path);
    return 0;
}

static int find_ftype(const char *name, const kvt_quant_ftype **out) {
    if ((*out = kvt_quant_ftype_find(name))) return 0;
    char names[256];
    kvt_quant_ftype_names(names, sizeof names);
    if (!strcasecmp(name, "q2_k_s")) /* llama-quantize refuses it without one too */
        return kvt_fail(KVT_EUNSUPPORTED,
                        "type %s needs an importance matrix, which kvtier quantize does not "
                        "take; supported: %s",
                        name, names);
    return kvt_fail(KVT_EARG, "unknown type '%s'; supported: %s", name, names);
}

int kvt_quantize_file(const char *in_path, const char *out_path, const char *type_name, kvt_quantize_params p) {
    const kvt_quant_ftype *ft;
    int rc = find_ftype(type_name, &ft);
    if (rc || (rc = check_paths(in_path, out_path))) return rc;
    quant_job j = {.p = p, .t0 = kvt_now()};
    if ((rc = kvt_gguf_open(in_path, (kvt_gguf **)&j.in))) return rc;
    if ((rc = make_plan(&j, ft))) goto done;
    kvt_gguf_writer *w = kvt_gguf_writer_new();
    for (uint64_t i = 0; i < j.in->n_kv; i++) {
        const kvt_gguf_kv *kv = &j.in->kv[i];
        if (!strcmp(kv->key, KEY_QVERSION) || !strcmp(kv->key, KEY_FTYPE)) continue;
        if (!strcmp(kv->key, KEY_ALIGNMENT)) /* the writer aligns to 32 */
            kvt_gguf_w_u32(w, KEY_ALIGNMENT, KVT_GGUF_DEFAULT_ALIGNMENT);
        else kvt_gguf_w_copy(w, kv);
    }
    kvt_gguf_w_u32(w, KEY_QVERSION, QUANT_VERSION);
    kvt_gguf_w_u32(w, KEY_FTYPE, ft->ftype);
    for (uint64_t i = 0; i < j.n; i++) {
        const kvt_gguf_tensor *t = j.plans[i].t;
        kvt_gguf_w_tensor(w, t->name, j.plans[i].to, t->n_dims, t->ne, fill, &j.plans[i]);
    }
    j.pool = kvt_pool_new(p.threads);
    if (!j.pool) {
        rc = kvt_fail(-ENOMEM, "cannot start %d threads", p.threads);
    } else {
        rc = kvt_gguf_write(w, out_path);
    }
    kvt_pool_free(j.pool);
    kvt_gguf_writer_free(w);
done:
    free(j.plans);
    kvt_gguf_close((kvt_gguf *)j.in);
    return rc;
}
