// SPDX-License-Identifier: MIT
/* The reply journal (reply_journal.h) over a real T2 directory: appends
 * replay into a fresh map after a reopen, newest kept; the file never holds
 * more than twice the map's capacity (it is rewritten from the map); it is
 * 0600; the side-file calls refuse a name outside "side-" and replace a link
 * under the journal's name without writing its target. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "model.h"
#include "reply_journal.h"
#include "testutil.h"
#include "tier_disk.h"

#define CAP 4
#define N_VOCAB 300
#define HEAD 32

static long file_size(const char *path) {
    struct stat sb;
    return lstat(path, &sb) ? -1 : (long)sb.st_size;
}

/* 1 if m holds "reply NN" with its ids. */
static int holds(kvt_reply_map *m, int i) {
    char text[32];
    snprintf(text, sizeof text, "reply %02d", i);
    kvt_reply_owner o = {"salt", 4, NULL};
    int32_t *ids = NULL;
    size_t n = kvt_reply_map_get_by(m, &o, text, &ids);
    int ok = n == 2 && ids[0] == i && ids[1] == i + 1;
    free(ids);
    return ok;
}

static void test_journal(kvt_cache *c, const char *path) {
    kvt_reply_map *m = kvt_reply_map_new(CAP, 16);
    kvt_reply_journal *j = kvt_reply_journal_open(c, m, CAP, N_VOCAB);
    CHECK(j != NULL);
    struct stat sb;
    CHECK(lstat(path, &sb) == 0 && S_ISREG(sb.st_mode) && (sb.st_mode & 0777) == 0600);
    CHECK(file_size(path) == HEAD);
    long rec = 0, most = 0;
    for (int i = 0; i < 20; i++) {
        char text[32];
        snprintf(text, sizeof text, "reply %02d", i);
        int32_t ids[2] = {i, i + 1};
        kvt_reply_owner o = {"salt", 4, NULL};
        uint8_t *r = NULL;
        size_t n = kvt_reply_map_put_rec(m, &o, text, NULL, NULL, ids, 2, &r);
        kvt_reply_journal_append(j, r, n);
        free(r);
        rec = (long)n;
        most = KVT_MAX(most, file_size(path));
    }
    CHECKF(most <= HEAD + 2 * CAP * rec, "the file held %ld bytes, records of %ld", most, rec);
    CHECKF(file_size(path) < HEAD + 20 * rec, "rewritten: %ld bytes", file_size(path));
    kvt_reply_journal_free(j);
    kvt_reply_map_free(m);
    /* a reopen replays the newest CAP replies */
    m = kvt_reply_map_new(CAP, 16);
    j = kvt_reply_journal_open(c, m, CAP, N_VOCAB);
    CHECK(j && holds(m, 19) && holds(m, 16) && !holds(m, 15));
    CHECK(file_size(path) == HEAD + CAP * rec);
    kvt_reply_journal_free(j);
    kvt_reply_map_free(m);
}

static void test_side_files(kvt_cache *c, const char *path) {
    kvt_disk *d = kvt_cache_disk(c);
    CHECK(d != NULL);
    CHECK(kvt_disk_side_open(d, "index", O_RDONLY) == -EINVAL);
    CHECK(kvt_disk_side_open(d, "side-../x", O_RDONLY) == -EINVAL);
    CHECK(kvt_disk_side_replace(d, "header", "x", 1) == -EINVAL);
    /* a link in the journal's place: not followed, replaced, its target untouched */
    const char *target = kvt_test_path(kvt_test_tmpdir(), "precious");
    FILE *f = fopen(target, "w");
    CHECK(f && fputs("precious\n", f) >= 0 && fclose(f) == 0);
    CHECK(unlink(path) == 0 && symlink(target, path) == 0);
    CHECK(kvt_disk_side_open(d, KVT_REPLY_JOURNAL_NAME, O_RDONLY) == -ELOOP);
    kvt_reply_map *m = kvt_reply_map_new(CAP, 16);
    kvt_reply_journal *j = kvt_reply_journal_open(c, m, CAP, N_VOCAB);
    CHECK(j != NULL);
    struct stat sb;
    CHECK(lstat(path, &sb) == 0 && S_ISREG(sb.st_mode));
    size_t n = 0;
    char *t = kvt_test_read_file(target, &n);
    CHECK(t && n == 9 && !memcmp(t, "precious\n", 9));
    free(t);
    kvt_reply_journal_free(j);
    kvt_reply_map_free(m);
}

int main(void) {
    kvt_model *model = kvt_test_tiny_model("rj.gguf", N_VOCAB);
    if (!model) return 1;
    kvt_engine *e = kvt_test_engine(model, 16, 64, 512);
    const char *dir = kvt_test_path(kvt_test_tmpdir(), "kv");
    kvt_cache *c = e ? kvt_test_cache(e, dir, 0) : NULL;
    if (c) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, KVT_REPLY_JOURNAL_NAME);
        test_journal(c, path);
        test_side_files(c, path);
    }
    kvt_cache_free(c);
    kvt_engine_free(e);
    kvt_model_free(model);
    return kvt_test_done("test_reply_journal");
}
