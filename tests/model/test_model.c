// SPDX-License-Identifier: MIT
/* Model loading rejects what it cannot run with a message naming the problem:
 * missing tensors, wrong shapes, unsupported types/architectures, bad metadata.
 * Every case is a real file derived from a valid mkmodel output. */
#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf.h"
#include "mkmodel.h"
#include "model.h"
#include "testutil.h"

#define FIFO_ALARM_S 20

typedef struct {
    const char *drop_kv;     /* metadata key to leave out */
    const char *set_u32_key; /* metadata key to (re)write as u32 */
    uint32_t set_u32_val;
    const char *set_i32_key; /* metadata key to (re)write as i32 */
    int32_t set_i32_val;
    const char *set_f32_key; /* metadata key to (re)write as f32 */
    float set_f32_val;
    const char *set_str_key;
    const char *set_str_val;
    const char *drop_tensor;    /* tensor to leave out */
    const char *reshape_tensor; /* tensor whose ne[0] is doubled */
    const char *retype_tensor;  /* tensor written as I32 */
    int no_tensors;             /* metadata alone: a vocab-only GGUF */
} edit;

static const kvt_gguf *src_g;

static int fill_copy(void *ctx, const char *name, void *buf, uint64_t n) {
    const kvt_gguf_tensor *t = kvt_gguf_tensor_find(src_g, name);
    memset(buf, 0, n);
    if (t) memcpy(buf, t->data, t->nbytes < n ? t->nbytes : n);
    return 0;
}

/* Writes a copy of src with one edit and tries to load it; returns the load code. */
static int load_edited(const char *src, edit e, const char *expect_in_msg) {
    kvt_gguf *g;
    if (kvt_gguf_open(src, &g)) return 99;
    src_g = g;
    kvt_gguf_writer *w = kvt_gguf_writer_new();
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const char *k = g->kv[i].key;
        if ((e.drop_kv && !strcmp(k, e.drop_kv)) || (e.set_u32_key && !strcmp(k, e.set_u32_key)) ||
            (e.set_str_key && !strcmp(k, e.set_str_key)) || (e.set_i32_key && !strcmp(k, e.set_i32_key)) ||
            (e.set_f32_key && !strcmp(k, e.set_f32_key)))
            continue;
        kvt_gguf_w_copy(w, &g->kv[i]);
    }
    if (e.set_u32_key) kvt_gguf_w_u32(w, e.set_u32_key, e.set_u32_val);
    if (e.set_str_key) kvt_gguf_w_str(w, e.set_str_key, e.set_str_val);
    if (e.set_i32_key) kvt_gguf_w_i32(w, e.set_i32_key, e.set_i32_val);
    if (e.set_f32_key) kvt_gguf_w_f32(w, e.set_f32_key, e.set_f32_val);
    for (uint64_t i = 0; i < (e.no_tensors ? 0 : g->n_tensors); i++) {
        const kvt_gguf_tensor *t = &g->tensors[i];
        if (e.drop_tensor && !strcmp(t->name, e.drop_tensor)) continue;
        uint64_t ne[4];
        memcpy(ne, t->ne, sizeof ne);
        uint32_t type = t->type;
        if (e.reshape_tensor && !strcmp(t->name, e.reshape_tensor)) ne[0] *= 2;
        if (e.retype_tensor && !strcmp(t->name, e.retype_tensor)) type = KVT_TYPE_I32;
        kvt_gguf_w_tensor(w, t->name, type, t->n_dims, ne, fill_copy, NULL);
    }
    const char *out = kvt_test_path(kvt_test_tmpdir(), "edited.gguf");
    int rc = kvt_gguf_write(w, out);
    kvt_gguf_writer_free(w);
    kvt_gguf_close(g);
    if (rc) return 98;
    kvt_model *m = NULL;
    rc = kvt_model_load(out, kvt_model_default_params(), &m);
    if (rc == 0) {
        kvt_model_free(m);
    } else if (expect_in_msg) {
        CHECKF(strstr(kvt_errmsg(), expect_in_msg) != NULL, "message '%s' lacks '%s'", kvt_errmsg(), expect_in_msg);
        CHECKF(strstr(kvt_errmsg(), "edited.gguf") != NULL, "message '%s' lacks the path", kvt_errmsg());
    }
    return rc;
}

/* Every float hyperparameter the loader reads refuses NaN, infinities, a
 * denormal, a negative and a huge value with a message naming the key and the
 * range, and takes an ordinary value; a zero is refused unless it means "off". */
static void test_float_ranges(const char *src, const char *gemma2) {
    static const struct {
        const char *key;
        float good;
        int zero_ok; /* 0 means "off" for this key */
        int gemma2;  /* the key is read from the gemma2 file */
    } keys[] = {
        {"llama.rope.freq_base", 500000.0f, 0, 0},
        {"llama.attention.layer_norm_rms_epsilon", 1e-6f, 0, 0},
        {"llama.rope.scaling.factor", 4.0f, 1, 0},
        {"llama.rope.scale_linear", 2.0f, 1, 0},
        {"gemma2.attn_logit_softcapping", 50.0f, 1, 1},
        {"gemma2.final_logit_softcapping", 30.0f, 1, 1},
        {"gemma2.rope.freq_base", 10000.0f, 0, 1},
        {"llama.rope.scaling.attn_factor", 1.0488f, 0, 0},
        {"llama.rope.scaling.yarn_log_multiplier", 0.1f, 1, 0},
    };
    const float bad[] = {NAN, INFINITY, -INFINITY, 1.4e-45f /* denormal */, -1.0f, 3e38f};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        const char *file = keys[k].gemma2 ? gemma2 : src;
        edit e = {.set_f32_key = keys[k].key, .set_f32_val = keys[k].good};
        CHECKF(load_edited(file, e, NULL) == 0, "%s = %g: %s", keys[k].key, (double)keys[k].good, kvt_errmsg());
        for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
            e.set_f32_val = bad[b];
            CHECKF(load_edited(file, e, keys[k].key) == KVT_EFORMAT, "%s = %g accepted", keys[k].key, (double)bad[b]);
            CHECKF(strstr(kvt_errmsg(), "expected") && strstr(kvt_errmsg(), "from"), "%s: no range in '%s'",
                   keys[k].key, kvt_errmsg());
        }
        e.set_f32_val = 0.0f;
        int rc = load_edited(file, e, keys[k].key);
        CHECKF(keys[k].zero_ok ? rc == 0 : rc == KVT_EFORMAT, "%s = 0 gave %d", keys[k].key, rc);
    }
}

/* Integer hyperparameters: zero, negative and huge values are refused naming the key. */
static void test_int_ranges(const char *src) {
    static const char *const keys[] = {"llama.embedding_length",
                                       "llama.block_count",
                                       "llama.feed_forward_length",
                                       "llama.attention.head_count",
                                       "llama.attention.head_count_kv",
                                       "llama.context_length",
                                       "llama.attention.key_length",
                                       "llama.rope.dimension_count",
                                       "llama.rope.scaling.original_context_length"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        const int32_t bad[] = {0, -1, INT32_MAX};
        for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
            edit e = {.set_i32_key = keys[k], .set_i32_val = bad[b]};
            CHECKF(load_edited(src, e, keys[k]) == KVT_EFORMAT, "%s = %d: %s", keys[k], bad[b], kvt_errmsg());
        }
    }
    edit e = {.set_i32_key = "llama.context_length", .set_i32_val = 131072};
    CHECK(load_edited(src, e, NULL) == 0);
}

int main(void) {
    kvt_mkmodel_params p = kvt_test_tiny_params();
    p.ff = 96;
    const char *src = kvt_test_path(kvt_test_tmpdir(), "base.gguf");
    if (kvt_mkmodel(&p, src)) {
        CHECKF(0, "mkmodel: %s", kvt_errmsg());
        return kvt_test_done("test_model");
    }
    static char srcbuf[4096];
    snprintf(srcbuf, sizeof srcbuf, "%s", src);
    src = srcbuf;

    edit none = {0};
    CHECK(load_edited(src, none, NULL) == 0);

    edit e = {.drop_tensor = "blk.1.ffn_down.weight"};
    CHECK(load_edited(src, e, "blk.1.ffn_down.weight") == KVT_ENOTFOUND);
    e = (edit){.drop_tensor = "output_norm.weight"};
    CHECK(load_edited(src, e, "output_norm") == KVT_ENOTFOUND);
    /* a vocab-only GGUF (a tokenizer and no tensors) says what it is, not which tensor it lacks */
    e = (edit){.no_tensors = 1};
    CHECK(load_edited(src, e, "holds a tokenizer only (no tensors): a vocab-only GGUF cannot be run") == KVT_EFORMAT);
    e = (edit){.reshape_tensor = "blk.0.attn_k.weight"};
    CHECK(load_edited(src, e, "blk.0.attn_k.weight has shape") == KVT_EFORMAT);
    e = (edit){.reshape_tensor = "blk.0.attn_norm.weight"};
    CHECK(load_edited(src, e, "blk.0.attn_norm.weight") == KVT_EFORMAT);
    e = (edit){.retype_tensor = "blk.0.attn_q.weight"};
    CHECK(load_edited(src, e, "type I32") == KVT_EUNSUPPORTED);
    e = (edit){.set_str_key = "general.architecture", .set_str_val = "mamba"};
    CHECK(load_edited(src, e, "mamba") == KVT_EUNSUPPORTED);
    e = (edit){.drop_kv = "llama.block_count"};
    CHECK(load_edited(src, e, "llama.block_count") == KVT_ENOTFOUND);
    e = (edit){.set_u32_key = "llama.attention.head_count", .set_u32_val = 3};
    CHECK(load_edited(src, e, "head_count") == KVT_EFORMAT);
    e = (edit){.set_u32_key = "llama.attention.head_count_kv", .set_u32_val = 3};
    CHECK(load_edited(src, e, "head_count_kv") == KVT_EFORMAT);
    e = (edit){.set_u32_key = "llama.embedding_length", .set_u32_val = 0};
    CHECK(load_edited(src, e, "embedding_length") == KVT_EFORMAT);
    e = (edit){.set_u32_key = "llama.rope.dimension_count", .set_u32_val = 17};
    CHECK(load_edited(src, e, "rope.dimension_count") == KVT_EFORMAT);
    e = (edit){.set_str_key = "llama.rope.scaling.type", .set_str_val = "ntk"};
    CHECK(load_edited(src, e, "llama.rope.scaling.type") == KVT_EUNSUPPORTED);
    e = (edit){.set_str_key = "llama.rope.scaling.type", .set_str_val = "yarn"};
    CHECK(load_edited(src, e, NULL) == 0);                            /* factor absent: YaRN of 1, the unscaled rope */
    e = (edit){.set_u32_key = "llama.block_count", .set_u32_val = 3}; /* blk.2.* missing */
    CHECK(load_edited(src, e, "blk.2.") == KVT_ENOTFOUND);

    /* a huge count is an error naming it, not an abort allocating 687 GB: past the range
     * (test_int_ranges), and inside it but past what the tensor directory can hold */
    e = (edit){.set_u32_key = "llama.block_count", .set_u32_val = 4096};
    CHECK(load_edited(src, e, "block_count 4096") == KVT_EFORMAT);

    e = (edit){.set_str_key = "llama.rope.scaling.type", .set_str_val = "linear"};
    CHECK(load_edited(src, e, NULL) == 0); /* factor absent: scale 1 */

    kvt_mkmodel_params gp = kvt_test_tiny_params();
    gp.arch = "gemma2";
    static char gemma2[4096];
    snprintf(gemma2, sizeof gemma2, "%s", kvt_test_path(kvt_test_tmpdir(), "gemma2.gguf"));
    CHECKF(kvt_mkmodel(&gp, gemma2) == 0, "mkmodel gemma2: %s", kvt_errmsg());
    test_float_ranges(src, gemma2);
    test_int_ranges(src);
    kvt_model *m;
    CHECK(kvt_model_load("/nonexistent.gguf", kvt_model_default_params(), &m) < 0 && m == NULL);
    /* a FIFO is refused at once instead of waiting for a writer (the alarm ends a hang as a failure) */
    const char *fifo = kvt_test_path(kvt_test_tmpdir(), "fifo.gguf");
    if (mkfifo(fifo, 0600) == 0) {
        alarm(FIFO_ALARM_S);
        CHECK(kvt_model_load(fifo, kvt_model_default_params(), &m) == KVT_EFORMAT && m == NULL);
        CHECKF(strstr(kvt_errmsg(), "not a regular file") != NULL, "message '%s'", kvt_errmsg());
        alarm(0);
        unlink(fifo);
    } else {
        printf("note: FIFO check skipped: mkfifo: %s\n", strerror(errno));
    }
    return kvt_test_done("test_model");
}
