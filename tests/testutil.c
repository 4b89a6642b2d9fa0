// SPDX-License-Identifier: MIT
/* Test harness helpers (see testutil.h). */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu.h"
#include "kvtier.h"
#include "mkmodel.h"
#include "model.h"
#include "sampler.h"

int kvt_test_failures;
int kvt_test_checks;

const char *kvt_test_shared(void) {
    const char *e = getenv("KVT_SHARED");
    return e && *e ? e : "../shared";
}

const char *kvt_test_bin(void) {
    const char *e = getenv("KVT_BIN");
    return e && *e ? e : "./kvtier";
}

const char *kvt_test_path(const char *dir, const char *name) {
    static char bufs[8][4096];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", dir, name);
    return b;
}

const char *kvt_test_tmpdir(void) {
    static char dir[256];
    if (!dir[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/kvt-test-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(dir)) {
            perror("mkdtemp");
            exit(1);
        }
    }
    return dir;
}

char *kvt_test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        fclose(f);
        return NULL;
    }
    buf[n] = 0;
    fclose(f);
    if (len) *len = (size_t)n;
    return buf;
}

static char skipped_parts[1024];

void kvt_test_skip_part(const char *why) {
    printf("note: skipped: %s\n", why);
    size_t l = strlen(skipped_parts);
    snprintf(skipped_parts + l, sizeof skipped_parts - l, "%s%s", l ? "; " : "", why);
}

int kvt_test_done(const char *name) {
    printf("%s: %d checks, %d failed\n", name, kvt_test_checks, kvt_test_failures);
    if (kvt_test_failures) return 1;
    if (kvt_test_checks == 0) { /* a test that checked nothing has not passed */
        printf("%s: FAIL: no check ran%s%s\n", name, *skipped_parts ? ": " : "", skipped_parts);
        return 1;
    }
    if (*skipped_parts) { /* the rest passed, but part of the test could not run: say so as a skip */
        printf("SKIP: %s: %s\n", name, skipped_parts);
        return 77;
    }
    return 0;
}

void kvt_test_skip(const char *why) {
    printf("SKIP: %s\n", why);
    exit(77);
}

struct kvt_model *kvt_test_tiny_model(const char *file_name, int n_vocab) {
    return kvt_test_tiny_model_typed(file_name, n_vocab, kvt_mkmodel_default_params().type);
}

kvt_mkmodel_params kvt_test_tiny_params(void) {
    kvt_mkmodel_params mp = kvt_mkmodel_default_params();
    mp.dim = 64;
    mp.layers = 2;
    mp.heads = 4;
    mp.kv_heads = 2;
    mp.ff = 128;
    return mp;
}

struct kvt_model *kvt_test_tiny_model_typed(const char *file_name, int n_vocab, uint32_t type) {
    kvt_mkmodel_params mp = kvt_test_tiny_params();
    mp.type = type;
    mp.vocab = n_vocab;
    const char *path = kvt_test_path(kvt_test_tmpdir(), file_name);
    kvt_model *m = NULL;
    if (kvt_mkmodel(&mp, path) || kvt_model_load(path, kvt_model_default_params(), &m)) {
        fprintf(stderr, "tiny model %s: %s\n", path, kvt_errmsg());
        return NULL;
    }
    return m;
}

kvt_engine *kvt_test_engine_new(const kvt_model *model, kvt_engine_params ep) {
    kvt_engine *e = NULL;
    int rc = kvt_engine_new(model, ep, &e);
    CHECKF(rc == 0, "engine: %s", kvt_errmsg());
    return e;
}

int32_t kvt_test_device(void) {
    const char *v = getenv("KVT_TEST_DEVICE");
    if (!v || !*v || !strcmp(v, "cpu")) return 0;
    kvt_test_gpu_variant();
    if (strcmp(v, "vulkan")) {
        fprintf(stderr, "KVT_TEST_DEVICE must be cpu or vulkan, not '%s'\n", v);
        exit(2);
    }
    static int listed; /* every engine a test makes asks: list the devices (an instance) once */
    if (!listed) {
        kvt_gpu_info *info = NULL;
        int n = 0;
        if (!kvt_gpu_built() || kvt_gpu_list(&info, &n) || n == 0)
            kvt_test_skip("KVT_TEST_DEVICE=vulkan, and this build or machine has no Vulkan device");
        free(info);
        listed = 1;
    }
    return 1;
}

void kvt_test_gpu_variant(void) {
    const char *v = getenv("KVT_GPU_VARIANT"), *san = getenv("KVT_SANITIZED");
    if (v && *v && san && *san)
        kvt_test_skip("a GPU variant: it runs in the release build; under the sanitizers the base GPU tests run "
                      "the same code, and lavapipe there is slow");
}

void kvt_test_engine_on_device(kvt_engine_params *ep) {
    ep->device = kvt_test_device();
    const char *ngl = getenv("KVT_TEST_NGL"); /* partial offload: the first N layers on the device */
    if (ep->device && ngl && *ngl) ep->n_gpu_layers = atoi(ngl);
}

kvt_engine *kvt_test_engine(const kvt_model *model, int32_t block, int32_t n_pages, int32_t n_ctx) {
    kvt_engine_params ep = kvt_engine_default_params();
    kvt_test_engine_on_device(&ep);
    ep.block_size = block;
    ep.n_pages = n_pages;
    ep.n_threads = 2;
    ep.n_ctx = n_ctx;
    return kvt_test_engine_new(model, ep);
}

kvt_cache *kvt_test_cache(kvt_engine *e, const char *dir, uint64_t ram_bytes) {
    kvt_cache_params cp = kvt_cache_default_params();
    cp.ram_bytes = ram_bytes;
    cp.disk_dir = dir;
    cp.disk_bytes = dir ? 64 << 20 : 0;
    cp.disk_admit = KVT_ADMIT_ALL;
    cp.restore = KVT_RESTORE_ALWAYS;
    kvt_cache *c = NULL;
    int rc = kvt_cache_new(e, cp, &c);
    CHECKF(rc == 0, "cache on %s: %s", dir ? dir : "(no disk)", kvt_errmsg());
    return c;
}

kvt_test_gen kvt_test_generate_rc(kvt_engine *e, kvt_cache *c, const int32_t *prompt, int32_t n, int32_t n_gen,
                                  const char *salt) {
    return kvt_test_generate_blend_rc(e, c, prompt, n, n_gen, salt, NULL, NULL, 0);
}

kvt_test_gen kvt_test_generate_blend_rc(kvt_engine *e, kvt_cache *c, const int32_t *prompt, int32_t n, int32_t n_gen,
                                        const char *salt, const kvt_blend_params *bp, const size_t *doc_starts,
                                        size_t n_docs) {
    kvt_test_gen o = {0};
    o.n_vocab = kvt_engine_n_vocab(e);
    kvt_sampler_params sp = kvt_sampler_default_params();
    sp.temp = 0;
    kvt_sampler *s = kvt_sampler_new(sp, o.n_vocab);
    o.logits = malloc((size_t)o.n_vocab * sizeof(float));
    kvt_gen_params gp = {.max_tokens = n_gen,
                         .sampler = s,
                         .first_logits = o.logits,
                         .blend = bp,
                         .doc_starts = doc_starts,
                         .n_docs = n_docs};
    if (salt) {
        gp.salt = salt;
        gp.salt_len = strlen(salt);
    }
    o.rc = kvt_generate(e, c, prompt, n, &gp, &o.tokens, &o.res);
    o.n = o.rc ? 0 : o.res.n_prompt + o.res.n_generated;
    kvt_sampler_free(s);
    return o;
}

kvt_test_gen kvt_test_generate(kvt_engine *e, kvt_cache *c, const int32_t *prompt, int32_t n, int32_t n_gen,
                               const char *salt) {
    return kvt_test_generate_blend(e, c, prompt, n, n_gen, salt, NULL, NULL, 0);
}

kvt_test_gen kvt_test_generate_blend(kvt_engine *e, kvt_cache *c, const int32_t *prompt, int32_t n, int32_t n_gen,
                                     const char *salt, const kvt_blend_params *bp, const size_t *doc_starts,
                                     size_t n_docs) {
    kvt_test_gen o = kvt_test_generate_blend_rc(e, c, prompt, n, n_gen, salt, bp, doc_starts, n_docs);
    CHECKF(o.rc == 0, "generate: %s", kvt_errmsg());
    return o;
}

int kvt_test_same(const kvt_test_gen *a, const kvt_test_gen *b) {
    return a->rc == 0 && b->rc == 0 && a->n > 0 && a->n == b->n && a->n_vocab == b->n_vocab &&
        !memcmp(a->tokens, b->tokens, (size_t)a->n * sizeof(int32_t)) &&
        !memcmp(a->logits, b->logits, (size_t)a->n_vocab * sizeof(float));
}

void kvt_test_gen_free(kvt_test_gen *g) {
    free(g->tokens);
    free(g->logits);
    g->tokens = NULL;
    g->logits = NULL;
}

void kvt_test_random_tokens(int32_t *t, int32_t n, int32_t n_vocab, unsigned *seed) {
    for (int32_t i = 0; i < n; i++) t[i] = 300 + (int32_t)(rand_r(seed) % (unsigned)(n_vocab - 300));
}
