// SPDX-License-Identifier: MIT
/* The disk tier's index checkpoint: a clean close writes one and the next
 * open takes every record from it without scanning headers; what was appended
 * after a periodic checkpoint (then kill -9) is scanned and found; a corrupt,
 * truncated, foreign or linked checkpoint is ignored and the full scan loses
 * nothing; a segment changed in place is rescanned; gc and clear remove it;
 * the prefix index an open builds from the checkpoint (also one listing a
 * record twice, and with a colliding block already in the index) is the one
 * a full scan builds. Every block is read back and its bytes checked. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "crc32c.h"
#include "disk_blocks.h"
#include "prefix.h"

static const char *ckpt_path(const char *dir) { return kvt_test_path(dir, "index"); }

static int exists(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0;
}

/* Opens dir with a fresh index; returns the store (NULL on failure, checked). */
static kvt_disk *open_with(kvt_disk_params *p, kvt_prefix **idx) {
    CHECK(kvt_prefix_new(B, idx) == 0);
    p->index = *idx;
    kvt_disk *d = NULL;
    int rc = kvt_disk_open(p, &d);
    CHECKF(rc == 0, "open %s: %s", p->dir, kvt_errmsg());
    return d;
}

static void close_with(kvt_disk *d, kvt_prefix *idx) {
    kvt_disk_close(d);
    kvt_prefix_free(idx);
}

/* Opens, checks every block in [0, n) is served with its bytes and is in the
 * index as T2, and returns the open's stats. */
static kvt_disk_stats reopen_check(kvt_disk_params *p, int n, const char *what) {
    kvt_prefix *idx;
    kvt_disk *d = open_with(p, &idx);
    kvt_disk_stats st;
    memset(&st, 0, sizeof st);
    if (!d) return st;
    kvt_disk_get_stats(d, &st);
    int served = 0, indexed = 0;
    for (int i = 0; i < n; i++) {
        kvt_prefix_info info;
        indexed += kvt_prefix_get(idx, hashes[i], &info) == 0 && (info.tiers & KVT_TIER_BIT(KVT_TIER_T2));
        served += get_ok(d, i, 0);
    }
    CHECKF(served == n && indexed == n, "%s: %d of %d served, %d indexed", what, served, n, indexed);
    close_with(d, idx);
    return st;
}

static void write_blocks(kvt_disk_params *p, int a, int b) {
    kvt_prefix *idx;
    kvt_disk *d = open_with(p, &idx);
    if (!d) return;
    put_range(d, a, b, 0);
    CHECK(kvt_disk_flush(d) == 0);
    close_with(d, idx);
}

static void test_clean_restart(void) {
    const char *dir = subdir("clean");
    kvt_disk_params p = params(dir);
    write_blocks(&p, 0, NBLK / 2);
    CHECK(exists(ckpt_path(dir)));
    kvt_disk_stats st = reopen_check(&p, NBLK / 2, "after a clean close");
    CHECKF(st.checkpoint_used && st.checkpoint_records == NBLK / 2, "used %d, %llu records", st.checkpoint_used,
           (unsigned long long)st.checkpoint_records);
    CHECKF(st.open_scanned_bytes == 0, "scanned %llu bytes", (unsigned long long)st.open_scanned_bytes);
    CHECK(st.records == NBLK / 2);

    /* a second session appends more; its close checkpoints everything */
    write_blocks(&p, NBLK / 2, NBLK);
    st = reopen_check(&p, NBLK, "after a second session");
    CHECK(st.checkpoint_used && st.checkpoint_records == NBLK && st.open_scanned_bytes == 0);

    /* the same records as a full scan finds */
    CHECK(unlink(ckpt_path(dir)) == 0);
    st = reopen_check(&p, NBLK, "without the checkpoint");
    CHECK(!st.checkpoint_used && st.checkpoint_records == 0 && st.open_scanned_bytes > 0 && st.records == NBLK);
}

/* Corrupt, truncated, empty, foreign and linked checkpoints: each is ignored
 * (full scan), and nothing is lost. */
static void test_bad_checkpoints(void) {
    const char *dir = subdir("bad");
    kvt_disk_params p = params(dir);
    write_blocks(&p, 0, NBLK);
    const char *ck = ckpt_path(dir);
    size_t len = 0;
    char *good = kvt_test_read_file(ck, &len);
    CHECK(good && len > 200);
    if (!good) return;
    static const char *const kinds[] = {"flipped byte", "truncated", "empty", "garbage", "symlink"};
    for (size_t k = 0; k < KVT_ARRAY_LEN(kinds); k++) {
        unlink(ck);
        if (k == 4) {
            const char *target = kvt_test_path(kvt_test_tmpdir(), "ckpt-target");
            FILE *f = fopen(target, "wb");
            fwrite(good, 1, len, f);
            fclose(f);
            CHECK(symlink(target, ck) == 0);
        } else {
            FILE *f = fopen(ck, "wb");
            if (k == 0) {
                good[len / 2] ^= 0x40;
                fwrite(good, 1, len, f);
                good[len / 2] ^= 0x40;
            } else if (k == 1) {
                fwrite(good, 1, len - 100, f);
            } else if (k == 3) {
                for (size_t i = 0; i < len; i++) fputc((int)(i * 131 % 251), f);
            }
            fclose(f);
        }
        kvt_disk_stats st = reopen_check(&p, NBLK, kinds[k]);
        CHECKF(!st.checkpoint_used && st.records == NBLK, "%s: used %d, %llu records", kinds[k], st.checkpoint_used,
               (unsigned long long)st.records);
        /* the close after it wrote a good one again */
        CHECK(exists(ck));
    }
    /* a checkpoint of another namespace is not used (its records are foreign there) */
    kvt_disk_params q = p;
    q.ns.lo ^= 1;
    kvt_prefix *idx;
    kvt_disk *d = open_with(&q, &idx);
    if (d) {
        kvt_disk_stats st;
        kvt_disk_get_stats(d, &st);
        CHECK(!st.checkpoint_used && st.records == 0 && st.foreign == NBLK);
        close_with(d, idx);
    }
    free(good);
}

/* A segment changed in place after the checkpoint (here: one record's
 * header damaged) is scanned again, as without a checkpoint. */
static void test_changed_segment(void) {
    const char *dir = subdir("changed");
    kvt_disk_params p = params(dir);
    write_blocks(&p, 0, NBLK);
    char seg[1024];
    snprintf(seg, sizeof seg, "%s/seg-0000000000000000.kvt", dir);
    int fd = open(seg, O_WRONLY);
    CHECK(fd >= 0);
    struct timespec pause = {0, 20 * 1000000L}; /* a later mtime even on coarse clocks */
    nanosleep(&pause, NULL);
    CHECK(pwrite(fd, "XXXX", 4, 0) == 4); /* the first record's magic */
    close(fd);
    kvt_prefix *idx;
    kvt_disk *d = open_with(&p, &idx);
    if (!d) return;
    kvt_disk_stats st;
    kvt_disk_get_stats(d, &st);
    CHECKF(st.checkpoint_used && st.corrupt == 1 && st.open_scanned_bytes > 0 && st.records == NBLK - 1,
           "used %d corrupt %llu scanned %llu records %llu", st.checkpoint_used, (unsigned long long)st.corrupt,
           (unsigned long long)st.open_scanned_bytes, (unsigned long long)st.records);
    int served = 0;
    for (int i = 0; i < NBLK; i++) served += get_ok(d, i, 0);
    CHECK(served == NBLK - 1);
    close_with(d, idx);
    /* gc rewrites segments: it removes the checkpoint */
    kvt_disk_gc_report rep;
    CHECK(kvt_disk_compact(dir, &root, &rep) == 0);
    CHECK(!exists(ckpt_path(dir)));
    write_blocks(&p, 0, 0);
    CHECK(exists(ckpt_path(dir)));
    uint64_t freed;
    CHECK(kvt_disk_clear(dir, &freed) == 0);
    CHECK(!exists(ckpt_path(dir)));
}

/* A periodic checkpoint, then more records, then kill -9: the reopen takes
 * the checkpoint's records and scans the rest; every flushed block is found. */
static void test_periodic_then_kill(void) {
    const char *dir = subdir("kill");
    kvt_disk_params p = params(dir);
    p.checkpoint_s = 0.001;
    int pipefd[2];
    CHECK(pipe(pipefd) == 0);
    pid_t c = fork();
    if (c == 0) {
        close(pipefd[0]);
        kvt_prefix *idx;
        kvt_disk *d = open_with(&p, &idx);
        if (!d) _exit(3);
        put_range(d, 0, NBLK / 2, 0);
        kvt_disk_flush(d);
        struct timespec ts = {0, 5 * 1000000L};
        nanosleep(&ts, NULL);
        put_range(d, NBLK / 2, NBLK / 2 + 1, 0); /* due: hands a checkpoint of the first half to the writer */
        kvt_disk_flush(d);
        for (int tries = 0; tries < 500; tries++) { /* wait until it is written */
            kvt_disk_stats st;
            kvt_disk_get_stats(d, &st);
            if (st.checkpoints_written) break;
            nanosleep(&ts, NULL);
        }
        /* more records: a later periodic checkpoint may cover some, never the
         * last put's (a checkpoint is taken as a put starts) */
        put_range(d, NBLK / 2 + 1, NBLK, 0);
        kvt_disk_flush(d);
        if (write(pipefd[1], "k", 1) != 1) _exit(4);
        for (;;) pause();
    }
    close(pipefd[1]);
    char ch;
    CHECK(read(pipefd[0], &ch, 1) == 1);
    close(pipefd[0]);
    kill(c, SIGKILL);
    int ws;
    waitpid(c, &ws, 0);
    CHECK(WIFSIGNALED(ws));
    CHECK(exists(ckpt_path(dir)));
    p.checkpoint_s = 0;
    kvt_disk_stats st = reopen_check(&p, NBLK, "after kill -9");
    CHECKF(st.checkpoint_used && st.checkpoint_records > 0 && st.checkpoint_records < NBLK && st.open_scanned_bytes > 0,
           "used %d, %llu records from it, %llu bytes scanned", st.checkpoint_used,
           (unsigned long long)st.checkpoint_records, (unsigned long long)st.open_scanned_bytes);
}

/* What the prefix index says about the blocks: per block its entry (parent,
 * tokens, tiers, child counts; handles are store slots and may differ), per
 * chain the lookup's length, and the children of the root and the nearest
 * one to a probe block (what a miss's explanation reads). */
typedef struct {
    int present[NBLK];
    kvt_prefix_info info[NBLK];
    int32_t tokens[NBLK][B];
    size_t hits[NBLK / 10];
    kvt_hash128 root_children[NBLK];
    size_t n_root_children;
    uint32_t nearest_common;
    kvt_prefix_stats st;
} index_view;

static int cmp_hash(const void *a, const void *b) {
    const kvt_hash128 *x = a, *y = b;
    if (x->hi != y->hi) return x->hi < y->hi ? -1 : 1;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static void view_index(kvt_prefix *idx, index_view *v) {
    memset(v, 0, sizeof *v);
    for (int i = 0; i < NBLK; i++) {
        v->present[i] = kvt_prefix_get(idx, hashes[i], &v->info[i]) == 0;
        if (v->present[i]) memcpy(v->tokens[i], v->info[i].tokens, sizeof v->tokens[i]);
        memset(v->info[i].handle, 0, sizeof v->info[i].handle);
        v->info[i].tokens = NULL;
    }
    kvt_prefix_hit hits[10];
    for (int c = 0; c < NBLK / 10; c++) v->hits[c] = kvt_prefix_lookup(idx, root, toks[c * 10], 10 * B, hits, 10);
    v->n_root_children = kvt_prefix_children(idx, root, v->root_children, NBLK);
    if (v->n_root_children <= NBLK) qsort(v->root_children, v->n_root_children, sizeof *v->root_children, cmp_hash);
    int32_t probe[B] = {toks[30][0], toks[30][1], -1, -1};
    kvt_prefix_info near;
    if (!kvt_prefix_nearest_child(idx, root, probe, &near, &v->nearest_common)) v->nearest_common = UINT32_MAX;
    kvt_prefix_get_stats(idx, &v->st);
}

/* Opens dir (a colliding T1 block for hashes[5] in the index first), checks
 * what it must have used and refused, and fills *v. */
static kvt_disk_stats open_view(kvt_disk_params *p, int want_ckpt, uint64_t want_collisions, index_view *v) {
    kvt_prefix *idx;
    CHECK(kvt_prefix_new(B, &idx) == 0);
    int32_t other[B] = {9, 9, 9, 9};
    CHECK(kvt_prefix_add(idx, hashes[5], parents[5], other, KVT_TIER_T1, 0) == 0);
    p->index = idx;
    kvt_disk *d = NULL;
    kvt_disk_stats st;
    memset(&st, 0, sizeof st);
    CHECKF(kvt_disk_open(p, &d) == 0, "open: %s", kvt_errmsg());
    if (!d) return st;
    kvt_disk_get_stats(d, &st);
    CHECKF(st.checkpoint_used == want_ckpt && st.records == NBLK - 1 && st.collisions == want_collisions,
           "checkpoint used %d (want %d), %llu records, %llu collisions (want %llu)", st.checkpoint_used, want_ckpt,
           (unsigned long long)st.records, (unsigned long long)st.collisions, (unsigned long long)want_collisions);
    CHECK(kvt_prefix_remove(idx, hashes[5], KVT_TIER_T1) == 0); /* only T2 is compared */
    view_index(idx, v);
    int served = 0;
    for (int i = 0; i < NBLK; i++) served += get_ok(d, i, 0);
    CHECKF(served == NBLK - 1, "%d served", served);
    close_with(d, idx);
    return st;
}

/* Appends a second copy of the checkpoint's last entry, with the lengths and
 * CRC made right again: a file we never write, which must still load. */
static void plant_duplicate(const char *ck) {
    size_t len = 0;
    uint8_t *b = (uint8_t *)kvt_test_read_file(ck, &len);
    CHECK(b && len > 96);
    if (!b) return;
    size_t re = 56 + 4 * B;
    uint8_t *n = kvt_xmalloc(len + re);
    memcpy(n, b, len);
    memcpy(n + len, b + len - re, re);
    uint64_t bytes = len + re, recs;
    memcpy(&recs, n + 72, 8);
    recs++;
    memcpy(n + 16, &bytes, 8);
    memcpy(n + 72, &recs, 8);
    memset(n + 12, 0, 4);
    uint32_t crc = kvt_crc32c(0, n, bytes);
    memcpy(n + 12, &crc, 4);
    FILE *f = fopen(ck, "wb");
    CHECK(f && fwrite(n, 1, bytes, f) == bytes);
    if (f) fclose(f);
    free(n);
    free(b);
}

static int same_view(const index_view *a, const index_view *b, const char *what) {
    int diff = 0;
    for (int i = 0; i < NBLK; i++)
        diff += a->present[i] != b->present[i] || memcmp(&a->info[i], &b->info[i], sizeof a->info[i]) ||
            memcmp(a->tokens[i], b->tokens[i], sizeof a->tokens[i]);
    diff += memcmp(a->hits, b->hits, sizeof a->hits) != 0;
    diff += a->n_root_children != b->n_root_children ||
        memcmp(a->root_children, b->root_children, sizeof a->root_children) != 0;
    diff += a->nearest_common != b->nearest_common;
    diff += a->st.entries != b->st.entries || a->st.ghosts != b->st.ghosts ||
        a->st.tier_entries[KVT_TIER_T2] != b->st.tier_entries[KVT_TIER_T2];
    CHECKF(diff == 0, "%s: %d differences from the full scan's index", what, diff);
    return diff == 0;
}

static void test_same_index_as_scan(void) {
    const char *dir = subdir("same");
    kvt_disk_params p = params(dir);
    write_blocks(&p, 0, NBLK);
    static index_view from_ckpt, from_dup, from_scan;
    /* the first checkpoint lists every block: the colliding one is refused on open */
    open_view(&p, 1, 1, &from_ckpt);
    /* the one its close wrote lists every block but that one, plus (planted) one twice */
    plant_duplicate(ckpt_path(dir));
    kvt_disk_stats st = open_view(&p, 1, 0, &from_dup);
    CHECKF(st.checkpoint_records == NBLK, "%llu records from it", (unsigned long long)st.checkpoint_records);
    CHECK(unlink(ckpt_path(dir)) == 0);
    open_view(&p, 0, 1, &from_scan);
    /* the block cut off by the collision is absent, its chain's lookups stop there */
    CHECK(!from_scan.present[5] && from_scan.present[6] && from_scan.hits[0] == 5);
    CHECK(from_scan.st.entries == NBLK - 1 && from_scan.n_root_children == NBLK / 10);
    same_view(&from_ckpt, &from_scan, "from the checkpoint");
    same_view(&from_dup, &from_scan, "from a checkpoint listing a record twice");
}

int main(void) {
    make_blocks();
    test_clean_restart();
    test_bad_checkpoints();
    test_changed_segment();
    test_periodic_then_kill();
    test_same_index_as_scan();
    return kvt_test_done("test_disk_ckpt");
}
