/* Model loading rejects what it cannot run with a message naming the problem:
 * missing tensors, wrong shapes, unsupported types/architectures, bad metadata.
 * Every case is a real file derived from a valid mkmodel output. */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf.h"
#include "mkmodel.h"
#include "model.h"
#include "testutil.h"

#define FIFO_ALARM_S 20

typedef struct {
    const char *drop_kv;           /* metadata key to leave out */
    const char *set_u32_key;       /* metadata key to (re)write as u32 */
    uint32_t set_u32_val;
    const char *set_str_key;
    const char *set_str_val;
    const char *drop_tensor;       /* tensor to leave out */
    const char *reshape_tensor;    /* tensor whose ne[0] is doubled */
    const char *retype_tensor;     /* tensor written as I32 */
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
            (e.set_str_key && !strcmp(k, e.set_str_key)))
            continue;
        kvt_gguf_w_copy(w, &g->kv[i]);
    }
    if (e.set_u32_key) kvt_gguf_w_u32(w, e.set_u32_key, e.set_u32_val);
    if (e.set_str_key) kvt_gguf_w_str(w, e.set_str_key, e.set_str_val);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
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
    e = (edit){.set_str_key = "llama.rope.scaling.type", .set_str_val = "yarn"};
    CHECK(load_edited(src, e, "yarn") == KVT_EUNSUPPORTED);
    e = (edit){.set_u32_key = "llama.block_count", .set_u32_val = 3}; /* blk.2.* missing */
    CHECK(load_edited(src, e, "blk.2.") == KVT_ENOTFOUND);

    /* issue 14, finding 10: a huge count is an error naming it, not an abort allocating 687 GB */
    e = (edit){.set_u32_key = "llama.block_count", .set_u32_val = 0x7fffffff};
    CHECK(load_edited(src, e, "block_count 2147483647") == KVT_EFORMAT);

    e = (edit){.set_str_key = "llama.rope.scaling.type", .set_str_val = "linear"};
    CHECK(load_edited(src, e, NULL) == 0); /* factor absent: scale 1 */
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
