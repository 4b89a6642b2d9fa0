/* Test harness helpers (see testutil.h). */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvtier.h"
#include "mkmodel.h"

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
    kvt_mkmodel_params mp = kvt_mkmodel_default_params();
    mp.dim = 64;
    mp.layers = 2;
    mp.heads = 4;
    mp.kv_heads = 2;
    mp.ff = 128;
    mp.vocab = n_vocab;
    const char *path = kvt_test_path(kvt_test_tmpdir(), file_name);
    kvt_model *m = NULL;
    if (kvt_mkmodel(&mp, path) || kvt_model_load(path, kvt_model_default_params(), &m)) {
        fprintf(stderr, "tiny model %s: %s\n", path, kvt_errmsg());
        return NULL;
    }
    return m;
}
