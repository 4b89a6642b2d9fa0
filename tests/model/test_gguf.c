// SPDX-License-Identifier: MIT
/* GGUF reader: every shared model and vocab parses; writer round-trips;
 * malformed inputs (truncations, bit flips, bad counts) fail cleanly. */
#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "testutil.h"

static void test_shared_files(void) {
    const char *dirs[] = {"models", "vocab"};
    int parsed = 0;
    for (size_t d = 0; d < 2; d++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", kvt_test_shared(), dirs[d]);
        DIR *dp = opendir(dir);
        if (!dp) continue;
        struct dirent *e;
        while ((e = readdir(dp))) {
            size_t n = strlen(e->d_name);
            if (n < 5 || strcmp(e->d_name + n - 5, ".gguf")) continue;
            kvt_gguf *g;
            int rc = kvt_gguf_open(kvt_test_path(dir, e->d_name), &g);
            CHECKF(rc == 0, "%s: %s", e->d_name, kvt_errmsg());
            if (rc) continue;
            parsed++;
            const char *model;
            CHECK(kvt_gguf_get_str(g, "tokenizer.ggml.model", &model) == 0);
            const kvt_gguf_kv *toks;
            CHECK(kvt_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks) == 0 && toks->arr_n > 0);
            kvt_gguf_close(g);
        }
        closedir(dp);
    }
    if (!parsed) kvt_test_skip_part("no shared GGUF files under ../shared: real files were not parsed");
}

static int fill_seq(void *ctx, const char *name, void *buf, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) ((uint8_t *)buf)[i] = (uint8_t)(i * 7 + 1);
    return 0;
}

/* Writes a small file with every value kind and two tensors; returns its bytes. */
static char *make_file(size_t *len) {
    const char *path = kvt_test_path(kvt_test_tmpdir(), "w.gguf");
    kvt_gguf_writer *w = kvt_gguf_writer_new();
    kvt_gguf_w_str(w, "general.architecture", "llama");
    kvt_gguf_w_u32(w, "llama.block_count", 3);
    kvt_gguf_w_f32(w, "llama.rope.freq_base", 10000.0f);
    kvt_gguf_w_bool(w, "flag", 1);
    int32_t ints[3] = {1, -2, 3};
    kvt_gguf_w_arr(w, "ints", KVT_GGUF_I32, ints, 3);
    const char *strs[] = {"a", "", "hello"};
    kvt_gguf_w_arr_str(w, "strs", strs, 3);
    uint64_t ne1[2] = {64, 3}, ne2[1] = {32};
    kvt_gguf_w_tensor(w, "t.f16", KVT_TYPE_F16, 2, ne1, fill_seq, NULL);
    kvt_gguf_w_tensor(w, "t.q8", KVT_TYPE_Q8_0, 1, ne2, fill_seq, NULL);
    CHECK(kvt_gguf_write(w, path) == 0);
    kvt_gguf_writer_free(w);
    return kvt_test_read_file(path, len);
}

static void test_roundtrip(void) {
    size_t len;
    char *buf = make_file(&len);
    CHECK(buf != NULL);
    if (!buf) return;
    kvt_gguf *g;
    CHECKF(kvt_gguf_open_mem(buf, len, &g) == 0, "%s", kvt_errmsg());
    int64_t i;
    double f;
    const char *s;
    const kvt_gguf_kv *a;
    CHECK(kvt_gguf_get_int(g, "llama.block_count", &i) == 0 && i == 3);
    CHECK(kvt_gguf_get_float(g, "llama.rope.freq_base", &f) == 0 && f == 10000.0);
    CHECK(kvt_gguf_get_str(g, "general.architecture", &s) == 0 && !strcmp(s, "llama"));
    CHECK(kvt_gguf_get_int(g, "flag", &i) == 0 && i == 1);
    CHECK(kvt_gguf_get_int(g, "general.architecture", &i) == KVT_ETYPE);
    CHECK(kvt_gguf_get_int(g, "missing", &i) == KVT_ENOTFOUND);
    CHECK(kvt_gguf_get_arr(g, "ints", &a) == 0 && a->arr_n == 3 && kvt_gguf_arr_int(a, 1) == -2);
    CHECK(kvt_gguf_get_arr(g, "strs", &a) == 0 && a->arr_n == 3);
    uint64_t sl;
    const char *e2 = kvt_gguf_arr_str(a, 2, &sl);
    CHECK(sl == 5 && !memcmp(e2, "hello", 5));
    kvt_gguf_arr_str(a, 1, &sl);
    CHECK(sl == 0);
    const kvt_gguf_tensor *t = kvt_gguf_tensor_find(g, "t.f16");
    CHECK(t && t->ne[0] == 64 && t->ne[1] == 3 && t->nbytes == 64 * 3 * 2 && t->type == KVT_TYPE_F16);
    CHECK(t && ((const uint8_t *)t->data)[5] == (uint8_t)(5 * 7 + 1));
    t = kvt_gguf_tensor_find(g, "t.q8");
    CHECK(t && t->nbytes == 34);
    kvt_gguf_close(g);

    /* every truncation fails cleanly (and names a reason) */
    int fails = 0;
    for (size_t n = 0; n < len; n++) {
        char *cut = malloc(n ? n : 1);
        memcpy(cut, buf, n);
        if (kvt_gguf_open_mem(cut, n, &g) == 0) {
            kvt_gguf_close(g);
        } else {
            fails++;
            CHECK(kvt_errmsg()[0] != 0);
        }
        free(cut);
    }
    /* only cuts inside the last tensor's alignment padding (64 - 34 bytes) may parse */
    CHECKF(fails == (int)len - 30, "%d of %zu truncations failed", fails, len);

    /* single-byte corruptions never crash; most header bytes are detected */
    srand(1);
    for (int iter = 0; iter < 4000; iter++) {
        char *bad = malloc(len);
        memcpy(bad, buf, len);
        size_t pos = (size_t)rand() % len;
        bad[pos] ^= (char)(1 + rand() % 255);
        if (kvt_gguf_open_mem(bad, len, &g) == 0) kvt_gguf_close(g);
        free(bad);
    }
    free(buf);
}

static void test_specific_errors(void) {
    size_t len;
    char *buf = make_file(&len);
    if (!buf) return;
    kvt_gguf *g;
    char *bad = malloc(len);
    memcpy(bad, buf, len);
    memcpy(bad, "GGUX", 4);
    CHECK(kvt_gguf_open_mem(bad, len, &g) == KVT_EFORMAT && strstr(kvt_errmsg(), "magic"));
    memcpy(bad, buf, len);
    uint32_t v = 99;
    memcpy(bad + 4, &v, 4);
    CHECK(kvt_gguf_open_mem(bad, len, &g) == KVT_EUNSUPPORTED && strstr(kvt_errmsg(), "version"));
    memcpy(bad, buf, len);
    uint64_t huge = UINT64_MAX / 2;
    memcpy(bad + 16, &huge, 8); /* n_kv */
    CHECK(kvt_gguf_open_mem(bad, len, &g) == KVT_EFORMAT);
    memcpy(bad, buf, len);
    memcpy(bad + 8, &huge, 8); /* n_tensors */
    CHECK(kvt_gguf_open_mem(bad, len, &g) == KVT_EFORMAT);
    CHECK(kvt_gguf_open("/nonexistent/x.gguf", &g) < 0 && strstr(kvt_errmsg(), "/nonexistent/x.gguf"));
    free(bad);
    free(buf);
}

int main(void) {
    test_shared_files();
    test_roundtrip();
    test_specific_errors();
    return kvt_test_done("test_gguf");
}
