// SPDX-License-Identifier: MIT
/* Disk tier: round trip and restart, batched reads, the index's T2 presence,
 * kill -9 crashes, corrupted / truncated / foreign files, namespace and
 * version changes, the size budget under churn with reinsertion, the lock
 * (in process and from a child), a full disk and a read-only directory,
 * batched reads through a ring of two slots, the admission filter, and the record MAC under both schemes (forged payloads,
 * nonces and scheme flags; downgrades; mixed directories). Payloads come from
 * a generator keyed by block hash, so any served byte can be checked. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include "blockhash.h"
#include "cli.h"
#include "common.h"
#include "disk_forge.h"
#include "prefix.h"
#include "testutil.h"
#include "tier_disk.h"

#include "disk_blocks.h"

/* A disk tier opened with p, given blocks [0, n) and closed again. */
static void fill(const kvt_disk_params *p, int n) {
    kvt_disk *d;
    CHECK(kvt_disk_open(p, &d) == 0);
    put_range(d, 0, n, 0);
    kvt_disk_flush(d);
    kvt_disk_close(d);
}

/* A disk tier opened with p over blocks [0, n) that it cannot check (another key or
 * scheme): all n are foreign records, and none is served. */
static kvt_disk *open_foreign(const kvt_disk_params *p, int n) {
    kvt_disk *d;
    kvt_disk_stats st;
    CHECK(kvt_disk_open(p, &d) == 0);
    kvt_disk_get_stats(d, &st);
    CHECKF(st.records == 0 && st.foreign == (uint64_t)n, "records %llu foreign %llu", (unsigned long long)st.records,
           (unsigned long long)st.foreign);
    int hits = 0;
    for (int i = 0; i < n; i++) hits += get_ok(d, i, 0);
    CHECK(hits == 0);
    return d;
}

static uint64_t dir_bytes(const char *dir) {
    DIR *dh = opendir(dir);
    uint64_t s = 0;
    struct dirent *e;
    while (dh && (e = readdir(dh))) {
        struct stat sb;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (e->d_name[0] != '.' && strncmp(e->d_name, "seg-", 4) == 0 && stat(p, &sb) == 0) s += (uint64_t)sb.st_size;
    }
    if (dh) closedir(dh);
    return s;
}

/* Name of the first (oldest) segment file of dir, into out. */
static int first_segment(const char *dir, char *out, size_t cap) {
    DIR *dh = opendir(dir);
    struct dirent *e;
    char best[256] = "";
    while (dh && (e = readdir(dh)))
        if (!strncmp(e->d_name, "seg-", 4) && (!best[0] || strcmp(e->d_name, best) < 0))
            snprintf(best, sizeof best, "%s", e->d_name);
    if (dh) closedir(dh);
    snprintf(out, cap, "%s/%s", dir, best);
    return best[0] != 0;
}

static int count_walk(void *ctx, const kvt_disk_walk_info *w) {
    (void)w;
    ++*(uint64_t *)ctx;
    return 0;
}

static int index_t2_count(kvt_prefix *idx) {
    kvt_prefix_stats s;
    kvt_prefix_get_stats(idx, &s);
    return (int)s.tier_entries[KVT_TIER_T2];
}

static void test_roundtrip(kvt_disk_codec codec) {
    const char *dir = subdir(codec == KVT_DISK_CODEC_ZSTD ? "rt-zstd" : "rt-raw");
    int comp = codec == KVT_DISK_CODEC_ZSTD;
    kvt_prefix *idx;
    kvt_prefix_new(B, &idx);
    kvt_disk_params p = params(dir);
    p.codec = codec;
    p.index = idx;
    kvt_disk *d;
    CHECK(kvt_disk_open(&p, &d) == 0);
    put_range(d, 0, 100, comp);
    CHECK(kvt_disk_flush(d) == 0);
    CHECK(index_t2_count(idx) == 100);
    int hits = 0;
    for (int i = 0; i < 100; i++) hits += get_ok(d, i, comp);
    CHECK(hits == 100);
    CHECK(kvt_disk_contains(d, hashes[5]) && !kvt_disk_contains(d, hashes[150]));
    /* a block under the same key with another parent or other tokens is a miss */
    uint8_t buf[PAYLOAD];
    int32_t other[B] = {1, 2, 3, 4};
    CHECK(kvt_disk_get(d, hashes[3], root, toks[3], buf) == KVT_ENOTFOUND);
    CHECK(kvt_disk_get(d, hashes[3], parents[3], other, buf) == KVT_ENOTFOUND);
    /* a repeated put stores nothing new */
    fill_payload(hashes[0], buf, comp);
    CHECK(kvt_disk_put(d, hashes[0], parents[0], toks[0], buf) == 1);
    kvt_disk_stats st;
    kvt_disk_get_stats(d, &st);
    CHECK(st.records == 100 && st.puts == 100 && st.hits == 100 && st.misses == 2);
    if (comp) CHECKF(st.compression_ratio > 2.0, "ratio %.2f", st.compression_ratio);
    else CHECK(st.compression_ratio == 1.0);
    kvt_disk_close(d);
    CHECK(index_t2_count(idx) == 0);

    /* restart: a new handle finds every block, and the index learns them again */
    CHECK(kvt_disk_open(&p, &d) == 0);
    CHECK(index_t2_count(idx) == 100);
    kvt_prefix_hit ph[12];
    int32_t seq[10 * B];
    for (int j = 0; j < 10; j++) memcpy(seq + j * B, toks[20 + j], sizeof toks[0]);
    CHECK(kvt_prefix_lookup(idx, root, seq, 10 * B, ph, 12) == 10 && ph[9].tier == KVT_TIER_T2);
    /* one batch of 40 blocks: adjacent records coalesce into few reads */
    static uint8_t outs[40][PAYLOAD];
    kvt_disk_read rq[40];
    for (int k = 0; k < 40; k++) rq[k] = (kvt_disk_read){hashes[k * 2], parents[k * 2], toks[k * 2], outs[k], -1};
    rq[39].hash = hashes[150]; /* never written */
    rq[39].parent = parents[150];
    rq[39].tokens = toks[150];
    CHECK(kvt_disk_get_many(d, rq, 40) == 39);
    for (int k = 0; k < 39; k++) {
        fill_payload(hashes[k * 2], buf, comp);
        CHECK(rq[k].result == 0 && !memcmp(outs[k], buf, PAYLOAD));
    }
    CHECK(rq[39].result == KVT_ENOTFOUND);
    CHECK(kvt_disk_remove(d, hashes[7]) == 0 && kvt_disk_remove(d, hashes[7]) == KVT_ENOTFOUND);
    CHECK(!get_ok(d, 7, comp) && index_t2_count(idx) == 99);
    kvt_disk_close(d);
    kvt_prefix_free(idx);
}

/* A second opener, in this process or another, is refused naming the owner. */
static void test_lock(void) {
    const char *dir = subdir("lock");
    kvt_disk_params p = params(dir);
    kvt_disk *d, *d2;
    CHECK(kvt_disk_open(&p, &d) == 0);
    CHECK(kvt_disk_open(&p, &d2) == -EWOULDBLOCK);
    char want[64];
    snprintf(want, sizeof want, "in use by pid %ld", (long)getpid());
    CHECKF(strstr(kvt_errmsg(), want) != NULL, "message: %s", kvt_errmsg());
    pid_t c = fork();
    if (c == 0) {
        kvt_disk *d3;
        int rc = kvt_disk_open(&p, &d3);
        _exit(rc == -EWOULDBLOCK && strstr(kvt_errmsg(), want) ? 0 : 1);
    }
    int ws;
    waitpid(c, &ws, 0);
    CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    uint64_t freed;
    CHECK(kvt_disk_clear(dir, &freed) == -EWOULDBLOCK);
    kvt_disk_close(d);
    CHECK(kvt_disk_open(&p, &d2) == 0); /* released on close */
    kvt_disk_close(d2);
}

/* kill -9 a writer at random moments: nothing torn or corrupt is ever served.
 * Each child first makes one batch durable and says so on a pipe, so every
 * round has something that must survive however late the machine runs it;
 * the kill then comes 1-40 ms into its writing. */
static void test_crash(void) {
    const char *dir = subdir("crash");
    kvt_disk_params p = params(dir);
    p.size_bytes = 16 * SEG;
    srand(4242);
    int served_total = 0;
    for (int round = 0; round < 20; round++) {
        int fds[2];
        CHECK(pipe(fds) == 0);
        pid_t c = fork();
        if (c == 0) {
            close(fds[0]);
            kvt_disk *d;
            if (kvt_disk_open(&p, &d)) _exit(3);
            put_range(d, 0, 1, 0);
            if (kvt_disk_flush(d) || write(fds[1], "1", 1) != 1) _exit(4);
            for (int k = 1;; k++) put_range(d, (k * 7) % NBLK, (k * 7) % NBLK + 1, 0);
        }
        close(fds[1]);
        char ready = 0;
        CHECKF(read(fds[0], &ready, 1) == 1, "round %d: the writer died before its first flush", round);
        close(fds[0]);
        struct timespec ts = {0, (long)(rand() % 40 + 1) * 1000000L};
        nanosleep(&ts, NULL);
        kill(c, SIGKILL);
        int ws;
        waitpid(c, &ws, 0);
        CHECK(WIFSIGNALED(ws));
        /* also tear the tail the way a power cut could: chop the newest segment mid-record */
        kvt_disk *d;
        int rc = kvt_disk_open(&p, &d);
        CHECKF(rc == 0, "reopen after crash %d: %s", round, kvt_errmsg());
        if (rc) continue;
        int served = 0;
        for (int i = 0; i < NBLK; i++) served += get_ok(d, i, 0);
        served_total += served;
        kvt_disk_stats st;
        kvt_disk_get_stats(d, &st);
        CHECK(st.bytes_used <= p.size_bytes + p.segment_bytes);
        kvt_disk_close(d);
    }
    CHECKF(served_total > 0, "no block survived any crash");
    printf("crash: %d blocks served over 20 kills\n", served_total);
}

static void flip(const char *path, uint64_t off) {
    int fd = open(path, O_RDWR);
    uint8_t b;
    CHECK(pread(fd, &b, 1, (off_t)off) == 1);
    b ^= 0x5A;
    CHECK(pwrite(fd, &b, 1, (off_t)off) == 1);
    close(fd);
}

static void test_corruption(void) {
    const char *dir = subdir("corrupt");
    kvt_disk_params p = params(dir);
    kvt_disk *d;
    fill(&p, 20);
    /* 12000-byte payload + 144-byte header -> 12 KiB records, 5 per 64 KiB segment */
    const uint64_t rec = 3 * 4096;
    char seg[1024];
    CHECK(first_segment(dir, seg, sizeof seg));
    flip(seg, 0 * rec + 50);                   /* block 0: header */
    flip(seg, 1 * rec + 4000);                 /* block 1: payload */
    flip(seg, 2 * rec + rec - 10);             /* block 2: padding, not covered: still fine */
    CHECK(truncate(seg, 4 * rec + 5000) == 0); /* block 4 torn, block 3 intact */
    FILE *f = fopen(kvt_test_path(dir, "notes.txt"), "w");
    fputs("not a segment\n", f);
    fclose(f);
    CHECK(kvt_disk_open(&p, &d) == 0);
    kvt_disk_stats st;
    kvt_disk_get_stats(d, &st);
    CHECKF(st.corrupt >= 2, "corrupt at open %llu", (unsigned long long)st.corrupt);
    CHECK(!get_ok(d, 0, 0));
    CHECK(!get_ok(d, 1, 0)); /* header fine, CRC refuses the payload */
    CHECK(get_ok(d, 2, 0) && get_ok(d, 3, 0));
    CHECK(!get_ok(d, 4, 0));
    int rest = 0;
    for (int i = 5; i < 20; i++) rest += get_ok(d, i, 0);
    CHECK(rest == 15);
    kvt_disk_get_stats(d, &st);
    CHECK(st.corrupt >= 3 && !kvt_disk_contains(d, hashes[1]));
    /* the store keeps working */
    put_range(d, 20, 30, 0);
    kvt_disk_flush(d);
    CHECK(get_ok(d, 25, 0));
    kvt_disk_close(d);

    /* walk and verify see the damage; gc removes it */
    kvt_disk_gc_report rep;
    CHECK(kvt_disk_compact(dir, &root, &rep) == 0);
    CHECKF(rep.dropped_corrupt >= 2 && rep.kept == 27, "kept %llu corrupt %llu", (unsigned long long)rep.kept,
           (unsigned long long)rep.dropped_corrupt);
    CHECK(kvt_disk_open(&p, &d) == 0);
    kvt_disk_get_stats(d, &st);
    CHECK(st.corrupt == 0 && st.records == 27);
    kvt_disk_close(d);

    /* another namespace: records are misses, counted foreign, not errors */
    kvt_disk_params q = p;
    q.ns.lo ^= 1;
    CHECK(kvt_disk_open(&q, &d) == 0);
    kvt_disk_get_stats(d, &st);
    CHECK(st.records == 0 && st.foreign == 27 && !get_ok(d, 5, 0));
    kvt_disk_close(d);
    CHECK(kvt_disk_open(&p, &d) == 0);
    CHECK(get_ok(d, 5, 0));
    kvt_disk_close(d);

    /* a kvtier header that is damaged (a namespace cut short, a garbled version line, nothing after
     * the first line) is still ours: read says damaged, not foreign; the directory is used, the
     * header written anew and every record served */
    static const char *const damaged[] = {"kvtier-disk-cache\nversion %d\nnamespace 00ab\n",
                                          "kvtier-disk-cache\nversi\x7fn %d\n", "kvtier-disk-cache\n"};
    uint32_t v;
    kvt_hash128 ns;
    for (size_t i = 0; i < KVT_ARRAY_LEN(damaged); i++) {
        FILE *dh = fopen(kvt_test_path(dir, "header"), "w");
        fprintf(dh, damaged[i], KVT_DISK_FORMAT_VERSION);
        fclose(dh);
        CHECK(kvt_disk_read_header(dir, &v, &ns) == KVT_EFORMAT);
        CHECKF(strstr(kvt_errmsg(), "header is a kvtier header but damaged"), "%s", kvt_errmsg());
        CHECKF(kvt_disk_open(&p, &d) == 0, "damaged header %zu: %s", i, kvt_errmsg());
        kvt_disk_get_stats(d, &st);
        CHECKF(st.records == 27 && get_ok(d, 5, 0), "damaged header %zu: %llu records", i,
               (unsigned long long)st.records);
        kvt_disk_close(d);
        CHECK(kvt_disk_read_header(dir, &v, &ns) == 0 && v == KVT_DISK_FORMAT_VERSION && kvt_hash128_eq(ns, root));
    }

    /* another format version in the header: nothing is trusted, nothing crashes */
    FILE *h = fopen(kvt_test_path(dir, "header"), "w");
    fprintf(h, "kvtier-disk-cache\nversion 99\nnamespace %016llx%016llx\n", (unsigned long long)root.hi,
            (unsigned long long)root.lo);
    fclose(h);
    CHECK(kvt_disk_open(&p, &d) == 0);
    kvt_disk_get_stats(d, &st);
    CHECK(st.records == 0 && !get_ok(d, 5, 0));
    kvt_disk_close(d);
    /* garbage header file: not a kvtier directory's (someone else's file named
     * "header"), so the directory is refused and the file left as it was */
    h = fopen(kvt_test_path(dir, "header"), "w");
    fputs("\x01\x02garbage", h);
    fclose(h);
    CHECK(kvt_disk_read_header(dir, &v, &ns) == KVT_EFORMAT);
    CHECKF(strstr(kvt_errmsg(), "header is not a kvtier header (its first line is not"), "%s", kvt_errmsg());
    CHECK(kvt_disk_open(&p, &d) == -ENOTEMPTY);
    CHECKF(strstr(kvt_errmsg(), "'header' is not a kvtier header"), "%s", kvt_errmsg());
    size_t hlen;
    char *htext = kvt_test_read_file(kvt_test_path(dir, "header"), &hlen);
    CHECK(htext && hlen == 9 && !memcmp(htext, "\x01\x02garbage", 9));
    free(htext);
    /* a header of this format again: adopted, and the header rewritten for this namespace */
    h = fopen(kvt_test_path(dir, "header"), "w");
    fprintf(h, "kvtier-disk-cache\nversion %d\nnamespace 0000000000000000000000000000abcd\n", KVT_DISK_FORMAT_VERSION);
    fclose(h);
    CHECK(kvt_disk_open(&p, &d) == 0);
    kvt_disk_close(d);
    CHECK(kvt_disk_read_header(dir, &v, &ns) == 0 && v == KVT_DISK_FORMAT_VERSION && kvt_hash128_eq(ns, root));
}

/* Batched reads through a ring of two slots (the smallest), with io_uring
 * or with pread: more extents than slots, in any order, reuse the slots; each
 * block still gets its own bytes, a corrupt record among them is refused and
 * dropped, and the others are served. */
static void test_read_ring(int uring) {
    const char *dir = subdir(uring ? "ring-uring" : "ring-pread");
    kvt_disk_params p = params(dir);
    p.read_ring_bytes = 1;
    p.use_io_uring = uring;
    fill(&p, 20);
    const uint64_t rec = 3 * 4096; /* 12 KiB records, 5 per 64 KiB segment */
    char seg[1024];
    CHECK(first_segment(dir, seg, sizeof seg));
    flip(seg, 1 * rec + 4000); /* block 1's payload */
    kvt_disk *d;
    CHECK(kvt_disk_open(&p, &d) == 0);
    static uint8_t outs[20][PAYLOAD];
    uint8_t want[PAYLOAD];
    kvt_disk_read rq[20];
    /* every other block, last first: ten extents through two slots */
    for (int k = 0; k < 10; k++) {
        int i = 18 - 2 * k;
        rq[k] = (kvt_disk_read){hashes[i], parents[i], toks[i], outs[k], -1};
    }
    CHECK(kvt_disk_get_many(d, rq, 10) == 10);
    for (int k = 0; k < 10; k++) {
        fill_payload(hashes[18 - 2 * k], want, 0);
        CHECKF(rq[k].result == 0 && !memcmp(outs[k], want, PAYLOAD), "block %d", 18 - 2 * k);
    }
    /* all twenty, reversed: one extent per segment, block 1 corrupt */
    memset(outs, 0, sizeof outs);
    for (int k = 0; k < 20; k++) rq[k] = (kvt_disk_read){hashes[19 - k], parents[19 - k], toks[19 - k], outs[k], -1};
    CHECK(kvt_disk_get_many(d, rq, 20) == 19);
    for (int k = 0; k < 20; k++) {
        int i = 19 - k;
        if (i == 1) {
            CHECK(rq[k].result != 0);
            continue;
        }
        fill_payload(hashes[i], want, 0);
        CHECKF(rq[k].result == 0 && !memcmp(outs[k], want, PAYLOAD), "block %d", i);
    }
    kvt_disk_stats st;
    kvt_disk_get_stats(d, &st);
    CHECK(st.corrupt == 1 && !kvt_disk_contains(d, hashes[1]) && kvt_disk_contains(d, hashes[2]));
    kvt_disk_close(d);
}

/* A batch whose reads hold several records each is checked on two threads,
 * each record's checks by one of them. In the first segment's one read of
 * five records, record 1 (the caller's half) gets a forged payload with its
 * CRCs made right again, so only the MAC refuses it, and record 3 (the
 * helper's half) a flipped byte, which the CRC refuses: both are refused,
 * counted and dropped, their neighbours in the same slot are served with
 * their own bytes, and a second batch serves the rest again, through the
 * split path each time. */
static void test_read_split(void) {
    const char *dir = subdir("ring-split");
    kvt_disk_params p = params(dir);
    fill(&p, 20);
    const uint64_t rec = 3 * 4096; /* 12 KiB records, 5 per 64 KiB segment */
    char seg[1024];
    CHECK(first_segment(dir, seg, sizeof seg));
    int fd = open(seg, O_RDWR);
    uint8_t *forged;
    kvt_disk_record r;
    CHECK(fd >= 0 && forge_read(fd, 1 * rec, &forged, &r) == 0);
    memset(forged + r.header_bytes, 0, r.stored_bytes);
    CHECK(forge_write(fd, 1 * rec, forged, &r));
    free(forged);
    close(fd);
    flip(seg, 3 * rec + 4000);
    kvt_disk *d;
    CHECK(kvt_disk_open(&p, &d) == 0);
    static uint8_t outs[20][PAYLOAD];
    uint8_t want[PAYLOAD];
    kvt_disk_read rq[20];
    for (int pass = 0; pass < 2; pass++) {
        memset(outs, 0, sizeof outs);
        for (int i = 0; i < 20; i++) rq[i] = (kvt_disk_read){hashes[i], parents[i], toks[i], outs[i], -1};
        size_t hits = kvt_disk_get_many(d, rq, 20);
        CHECKF(hits == 18, "pass %d hits %zu", pass, hits);
        for (int i = 0; i < 20; i++) {
            if (i == 1 || i == 3) {
                CHECKF(rq[i].result != 0, "pass %d block %d served", pass, i);
                continue;
            }
            fill_payload(hashes[i], want, 0);
            CHECKF(rq[i].result == 0 && !memcmp(outs[i], want, PAYLOAD), "pass %d block %d", pass, i);
        }
        kvt_disk_stats st;
        kvt_disk_get_stats(d, &st);
        CHECKF(st.corrupt == 2 && st.read_slots_split >= (uint64_t)(pass + 1) * 3, "corrupt %llu split %llu",
               (unsigned long long)st.corrupt, (unsigned long long)st.read_slots_split);
        CHECK(!kvt_disk_contains(d, hashes[1]) && !kvt_disk_contains(d, hashes[3]) && kvt_disk_contains(d, hashes[2]));
    }
    kvt_disk_close(d);
}

/* Heavy churn with reads: the files never exceed budget + one segment, and hit
 * blocks are reinserted rather than lost. */
static void test_budget(void) {
    const char *dir = subdir("budget");
    kvt_prefix *idx;
    kvt_prefix_new(B, &idx);
    kvt_disk_params p = params(dir);
    p.size_bytes = 4 * SEG;
    p.index = idx;
    kvt_disk *d;
    CHECK(kvt_disk_open(&p, &d) == 0);
    uint64_t worst = 0;
    for (int round = 0; round < 20; round++) {
        put_range(d, (round * 10) % NBLK, (round * 10) % NBLK + 10, 0);
        kvt_disk_flush(d);
        get_ok(d, 0, 0); /* block 0 is hot */
        uint64_t b = dir_bytes(dir);
        if (b > worst) worst = b;
        CHECK(b <= p.size_bytes + p.segment_bytes);
        kvt_disk_stats st;
        kvt_disk_get_stats(d, &st);
        CHECK(st.bytes_used == b);
        CHECK(index_t2_count(idx) == (int)st.records);
    }
    kvt_disk_stats st;
    kvt_disk_get_stats(d, &st);
    CHECK(st.segments_reclaimed > 0 && st.evicted > 0 && st.reinserted > 0);
    CHECK(get_ok(d, 0, 0)); /* survived many reclaims */
    printf("budget: worst %llu bytes of %llu + %d; %llu reclaimed, %llu reinserted\n", (unsigned long long)worst,
           (unsigned long long)p.size_bytes, SEG, (unsigned long long)st.segments_reclaimed,
           (unsigned long long)st.reinserted);
    kvt_disk_close(d);
    /* a smaller budget at the next open trims at once */
    p.size_bytes = 2 * SEG;
    CHECK(kvt_disk_open(&p, &d) == 0);
    CHECK(dir_bytes(dir) <= p.size_bytes);
    kvt_disk_get_stats(d, &st);
    CHECK(index_t2_count(idx) == (int)st.records);
    kvt_disk_close(d);
    kvt_prefix_free(idx);
}

/* Counts lines containing what in file. */
static int count_lines(const char *path, const char *what) {
    size_t n;
    char *s = kvt_test_read_file(path, &n);
    int c = 0;
    for (char *q = s; q && (q = strstr(q, what)); q++) c++;
    free(s);
    return c;
}

static void test_full_and_readonly(void) {
    const char *mnt = subdir("small-fs");
    mkdir(mnt, 0755);
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=256k")) {
        printf("SKIP part: cannot mount a small tmpfs (%s): full-disk and read-only checks not run\n", strerror(errno));
        return;
    }
    const char *dir = subdir("small-fs/cache");
    kvt_disk_params p = params(dir);
    p.size_bytes = 64 * SEG; /* far more than the filesystem holds */
    kvt_disk *d;
    CHECK(kvt_disk_open(&p, &d) == 0);
    /* capture stderr to count warnings */
    const char *log = subdir("full.log");
    fflush(stderr);
    int saved = dup(2), lf = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(lf, 2);
    put_range(d, 0, 10, 0);
    kvt_disk_flush(d);
    uint8_t pay[PAYLOAD];
    /* more than the filesystem holds; retry a full queue so the disk, not the queue, runs out */
    for (int i = 10; i < 60; i++) {
        fill_payload(hashes[i], pay, 0);
        int rc;
        while ((rc = kvt_disk_put(d, hashes[i], parents[i], toks[i], pay)) == KVT_ELIMIT) kvt_disk_flush(d);
        if (rc == KVT_EUNSUPPORTED) break;
    }
    int frc = kvt_disk_flush(d);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(lf);
    kvt_disk_stats st;
    kvt_disk_get_stats(d, &st);
    CHECKF(frc == -ENOSPC && st.writes_disabled && st.dropped > 0, "flush %d disabled %d dropped %llu records %llu",
           frc, st.writes_disabled, (unsigned long long)st.dropped, (unsigned long long)st.records);
    CHECKF(count_lines(log, "writes disabled") == 1, "%d warnings", count_lines(log, "writes disabled"));
    int served = 0;
    for (int i = 0; i < 60; i++) served += get_ok(d, i, 0);
    CHECK(served >= 10 && get_ok(d, 3, 0)); /* reads continue */
    CHECK(kvt_disk_put(d, hashes[70], parents[70], toks[70], pay) == KVT_EUNSUPPORTED);
    kvt_disk_close(d);

    /* read-only filesystem: opens, serves, refuses writes */
    if (mount(NULL, mnt, NULL, MS_REMOUNT | MS_RDONLY, NULL)) {
        printf("SKIP part: cannot remount read-only (%s)\n", strerror(errno));
    } else {
        CHECK(kvt_disk_open(&p, &d) == 0);
        kvt_disk_get_stats(d, &st);
        CHECK(st.writes_disabled && st.records >= 10);
        CHECK(get_ok(d, 3, 0));
        CHECK(kvt_disk_put(d, hashes[70], parents[70], toks[70], pay) == KVT_EUNSUPPORTED);
        kvt_disk_close(d);
    }
    umount(mnt);
}


/* A file outside the cache directory that planted links point at: it must
 * never change. */
#define VICTIM_TEXT "precious bytes that kvtier must never touch\n"

static const char *make_victim(const char *name) {
    const char *v = subdir(name);
    FILE *f = fopen(v, "w");
    fputs(VICTIM_TEXT, f);
    fclose(f);
    return v;
}

static int victim_intact(const char *v) {
    size_t n;
    char *s = kvt_test_read_file(v, &n);
    int ok = s && n == strlen(VICTIM_TEXT) && !memcmp(s, VICTIM_TEXT, n);
    free(s);
    return ok;
}

static void plant_link(const char *dir, const char *name, const char *target) {
    const char *at = kvt_test_path(dir, name);
    unlink(at);
    CHECKF(symlink(target, at) == 0, "symlink %s: %s", at, strerror(errno));
}

static int is_link(const char *dir, const char *name) {
    struct stat sb;
    return lstat(kvt_test_path(dir, name), &sb) == 0 && S_ISLNK(sb.st_mode);
}

/* Links planted under every name the store writes (lock, header.tmp,
 * .odirect-probe, stats.tmp, a segment, a gc temp) never lead a write outside
 * the directory: temporaries are replaced, the lock and segments refused or
 * skipped. A hard-linked lock, a FIFO named like a segment, a directory that
 * is a link, writable by others or owned by someone else are refused. */
static void test_dir_security(void) {
    const char *dir = subdir("sec/links"); /* parent "sec" does not exist yet: created 0700 too */
    const char *victim = make_victim("victim.txt");
    kvt_disk_params p = params(dir);
    kvt_disk *d;
    fill(&p, 10);
    struct stat sb;
    CHECK(stat(dir, &sb) == 0 && (sb.st_mode & 0777) == 0700);
    CHECK(stat(subdir("sec"), &sb) == 0 && (sb.st_mode & 0777) == 0700);
    CHECK(stat(kvt_test_path(dir, "lock"), &sb) == 0 && (sb.st_mode & 0777) == 0600);

    /* a lock that is a link: refused, naming the file */
    unlink(kvt_test_path(dir, "lock"));
    plant_link(dir, "lock", victim);
    CHECK(kvt_disk_open(&p, &d) == -ELOOP);
    CHECKF(strstr(kvt_errmsg(), "lock is a symbolic link"), "%s", kvt_errmsg());
    uint64_t freed;
    CHECK(kvt_disk_clear(dir, &freed) == -ELOOP);
    kvt_disk_gc_report rep;
    CHECK(kvt_disk_compact(dir, &root, &rep) == -ELOOP);
    CHECK(victim_intact(victim));
    /* a lock hard-linked to another file: refused (the pid would land there) */
    unlink(kvt_test_path(dir, "lock"));
    CHECK(link(victim, kvt_test_path(dir, "lock")) == 0);
    CHECK(kvt_disk_open(&p, &d) == -EINVAL);
    CHECKF(strstr(kvt_errmsg(), "hard links"), "%s", kvt_errmsg());
    CHECK(victim_intact(victim));
    unlink(kvt_test_path(dir, "lock"));

    /* temporaries and a segment name that are links: the store works around them */
    plant_link(dir, "header.tmp", victim);
    plant_link(dir, ".odirect-probe", victim);
    plant_link(dir, "stats.tmp", victim);
    plant_link(dir, "seg-00000000000000ff.kvt", victim);
    /* a header naming another namespace, so that open rewrites it through header.tmp */
    FILE *h = fopen(kvt_test_path(dir, "header"), "w");
    fprintf(h, "kvtier-disk-cache\nversion %d\nnamespace 0000000000000000000000000000abcd\n", KVT_DISK_FORMAT_VERSION);
    fclose(h);
    CHECK(kvt_disk_open(&p, &d) == 0);
    kvt_disk_stats st;
    kvt_disk_get_stats(d, &st);
    CHECKF(st.records == 10, "%llu records", (unsigned long long)st.records);
    int hits = 0;
    for (int i = 0; i < 10; i++) hits += get_ok(d, i, 0);
    CHECK(hits == 10);
    put_range(d, 10, 30, 0); /* new segments are numbered past the planted name */
    kvt_disk_flush(d);
    CHECK(get_ok(d, 25, 0));
    kvt_disk_close(d);
    CHECK(victim_intact(victim));
    CHECK(!is_link(dir, "header.tmp") && !is_link(dir, ".odirect-probe") && !is_link(dir, "stats.tmp"));
    uint32_t v;
    kvt_hash128 ns;
    CHECK(kvt_disk_read_header(dir, &v, &ns) == 0 && kvt_hash128_eq(ns, root));
    kvt_disk_lifetime lt;
    CHECK(kvt_disk_read_lifetime(dir, &lt) == 0 && lt.sessions >= 2);

    /* gc: a link under a segment's temp name is replaced, not written through */
    plant_link(dir, "seg-0000000000000000.kvt.tmp", victim);
    plant_link(dir, "seg-0000000000000100.kvt.tmp", victim);
    flip(kvt_test_path(dir, "seg-0000000000000100.kvt"), 5000); /* force a rewrite of that segment */
    CHECK(kvt_disk_compact(dir, &root, &rep) == 0);
    CHECK(victim_intact(victim));
    CHECK(is_link(dir, "seg-00000000000000ff.kvt")); /* not ours: left alone */
    /* the walk skips the link too */
    uint64_t seen = 0;
    CHECK(kvt_disk_walk(dir, 1, count_walk, &seen) == 0 && seen > 0);
    /* clear removes the link itself, not its target */
    CHECK(kvt_disk_clear(dir, &freed) == 0);
    CHECK(victim_intact(victim) && !is_link(dir, "seg-00000000000000ff.kvt"));

    /* a FIFO named like a segment is skipped, not waited on (alarm: a hang kills the test) */
    CHECK(mkfifo(kvt_test_path(dir, "seg-0000000000000fff.kvt"), 0600) == 0);
    alarm(60);
    seen = 0;
    CHECK(kvt_disk_walk(dir, 0, count_walk, &seen) == 0);
    CHECK(kvt_disk_open(&p, &d) == 0);
    kvt_disk_close(d);
    CHECK(kvt_disk_compact(dir, &root, &rep) == 0);
    alarm(0);
    CHECK(kvt_disk_clear(dir, &freed) == 0);

    /* the directory itself a link (with or without a trailing slash): refused */
    const char *ldir = subdir("sec/dirlink");
    CHECK(symlink(dir, ldir) == 0);
    p = params(ldir);
    CHECK(kvt_disk_open(&p, &d) == -ELOOP);
    CHECKF(strstr(kvt_errmsg(), "symbolic link"), "%s", kvt_errmsg());
    char slash[600];
    snprintf(slash, sizeof slash, "%s/", ldir);
    p = params(slash);
    CHECK(kvt_disk_open(&p, &d) == -ELOOP);
    CHECK(kvt_disk_walk(ldir, 0, count_walk, &seen) == -ELOOP);

    /* writable by others: refused with the fix in the message; readers may still look */
    const char *wdir = subdir("sec/open");
    CHECK(mkdir(wdir, 0700) == 0 && chmod(wdir, 0777) == 0);
    p = params(wdir);
    CHECK(kvt_disk_open(&p, &d) == -EACCES);
    CHECKF(strstr(kvt_errmsg(), "writable by others") && strstr(kvt_errmsg(), "chmod 700"), "%s", kvt_errmsg());
    CHECK(kvt_disk_clear(wdir, &freed) == -EACCES && kvt_disk_compact(wdir, NULL, &rep) == -EACCES);
    CHECK(chmod(wdir, 0770) == 0 && kvt_disk_open(&p, &d) == -EACCES);
    CHECKF(strstr(kvt_errmsg(), "writable by its group"), "%s", kvt_errmsg());
    CHECK(kvt_disk_walk(wdir, 0, count_walk, &seen) == 0);
    CHECK(chmod(wdir, 0755) == 0 && kvt_disk_open(&p, &d) == 0); /* readable by others is fine */
    kvt_disk_close(d);

    /* owned by another user (needs root to chown) */
    if (geteuid() == 0) {
        const char *odir = subdir("sec/theirs");
        CHECK(mkdir(odir, 0700) == 0 && chown(odir, 65534, 65534) == 0);
        p = params(odir);
        CHECK(kvt_disk_open(&p, &d) == -EACCES);
        CHECKF(strstr(kvt_errmsg(), "belongs to uid 65534"), "%s", kvt_errmsg());
        CHECK(kvt_disk_clear(odir, &freed) == -EACCES);
    } else {
        printf("SKIP part: not root, cannot chown a directory to another user\n");
    }
}

typedef struct {
    uint64_t valid, corrupt, mac_ok, no_mac;
    uint64_t scheme[2]; /* valid records carrying a MAC, by KVT_DISK_SCHEME_* */
} mac_walk;

static int mac_walk_fn(void *ctx, const kvt_disk_walk_info *w) {
    mac_walk *m = ctx;
    if (w->status) {
        m->corrupt++;
        return 0;
    }
    m->valid++;
    m->mac_ok += w->mac == KVT_DISK_MAC_OK;
    m->no_mac += w->mac == KVT_DISK_MAC_NONE;
    if (w->mac != KVT_DISK_MAC_NONE && w->rec.mac_scheme < 2) m->scheme[w->rec.mac_scheme]++;
    return 0;
}

/* subdir(prefix-tag), copied into out (subdir's buffers are reused). */
static const char *tagged_dir(char *out, size_t cap, const char *prefix, const char *tag) {
    char name[128];
    snprintf(name, sizeof name, "%s-%s", prefix, tag);
    snprintf(out, cap, "%s", subdir(name));
    return out;
}

/* `kvtier cache verify --kv-disk dir`, stdout into a file; returns its exit
 * code and the output in *text (caller frees). */
static int cli_verify(const char *dir, char **text) {
    const char *out = subdir("verify.out");
    fflush(stdout);
    int saved = dup(1), fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    close(fd);
    char *argv[] = {"cache", "verify", "--kv-disk", (char *)dir};
    int rc = kvt_cmd_cache(4, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    *text = kvt_test_read_file(out, NULL);
    return rc;
}

/* The attack: records whose payload was zeroed, or swapped with a
 * neighbour's, with both CRCs recomputed. CRCs pass; the keyed MAC refuses
 * them: misses counted corrupt, never served, and `cache verify` says invalid.
 * Without the MAC (params.mac = 0) the same records are served: the MAC is
 * what stops them. The key file is 0600; without it MAC'd records are misses.
 * Run once per scheme (tag names it; the caller sets KVT_DISK_MAC_SCHEME);
 * records must carry `scheme`. */
static void test_mac(const char *tag, kvt_disk_mac_scheme scheme) {
    char dir_buf[512], sdir_buf[512], ndir_buf[512];
    const char *dir = tagged_dir(dir_buf, sizeof dir_buf, "mac", tag);
    kvt_disk_params p = params(dir);
    kvt_disk_gc_report rep;
    CHECK(p.mac == 1); /* on by default */
    kvt_disk *d;
    fill(&p, 20);
    struct stat sb;
    CHECK(lstat(kvt_test_path(dir, "key"), &sb) == 0 && S_ISREG(sb.st_mode) && (sb.st_mode & 07777) == 0600 &&
          sb.st_size == KVT_DISK_KEY_BYTES && sb.st_uid == geteuid());
    mac_walk m = {0};
    CHECK(kvt_disk_walk(dir, 1, mac_walk_fn, &m) == 0);
    CHECKF(m.valid == 20 && m.mac_ok == 20 && m.corrupt == 0, "valid %llu mac %llu", (unsigned long long)m.valid,
           (unsigned long long)m.mac_ok);
    CHECKF(m.scheme[scheme] == 20, "%s: %llu of 20 records under scheme %d", tag, (unsigned long long)m.scheme[scheme],
           (int)scheme);

    /* zero every payload of the first segment (5 records), CRCs recomputed */
    char seg[1024];
    CHECK(first_segment(dir, seg, sizeof seg));
    CHECK(forge_segment(seg, 0) == 5);
    /* the CRCs alone now vouch for them: a walk without the key finds nothing wrong */
    kvt_disk_record r;
    uint8_t *rec;
    int fd = open(seg, O_RDONLY);
    CHECK(forge_read(fd, 0, &rec, &r) == 0);
    close(fd);
    uint8_t key[KVT_DISK_KEY_BYTES];
    FILE *kf = fopen(kvt_test_path(dir, "key"), "rb");
    CHECK(kf && fread(key, 1, sizeof key, kf) == sizeof key);
    if (kf) fclose(kf);
    CHECK(kvt_disk_record_check_mac(&r, key) == KVT_EFORMAT);
    free(rec);
    memset(&m, 0, sizeof m);
    CHECK(kvt_disk_walk(dir, 1, mac_walk_fn, &m) == 0);
    CHECKF(m.corrupt == 5 && m.valid == 15, "corrupt %llu valid %llu", (unsigned long long)m.corrupt,
           (unsigned long long)m.valid);
    char *text;
    CHECK(cli_verify(dir, &text) == 1);
    CHECKF(text && strstr(text, "15 valid, 5 corrupt"), "%s", text);
    free(text);

    /* without the MAC the forged payloads are served: what the MAC stops */
    kvt_disk_params nomac = p;
    nomac.mac = 0;
    CHECK(kvt_disk_open(&nomac, &d) == 0);
    uint8_t got[PAYLOAD], zero[PAYLOAD] = {0};
    CHECK(kvt_disk_get(d, hashes[1], parents[1], toks[1], got) == 0 && !memcmp(got, zero, PAYLOAD));
    kvt_disk_close(d);

    /* with it: every forged record a miss, counted corrupt; the rest served */
    CHECK(kvt_disk_open(&p, &d) == 0);
    int hits = 0;
    for (int i = 0; i < 20; i++) hits += get_ok(d, i, 0); /* a served forged payload fails get_ok */
    kvt_disk_stats st;
    kvt_disk_get_stats(d, &st);
    CHECKF(hits == 15 && st.corrupt == 5, "hits %d corrupt %llu", hits, (unsigned long long)st.corrupt);
    for (int i = 0; i < 5; i++) CHECK(!kvt_disk_contains(d, hashes[i]));
    kvt_disk_close(d);

    /* payloads swapped between neighbours, CRCs recomputed: refused too */
    const char *sdir = tagged_dir(sdir_buf, sizeof sdir_buf, "mac-swap", tag);
    p = params(sdir);
    fill(&p, 20);
    CHECK(first_segment(sdir, seg, sizeof seg));
    CHECK(forge_segment(seg, 1) == 4); /* records 0<->1, 2<->3 */
    CHECK(cli_verify(sdir, &text) == 1);
    CHECKF(text && strstr(text, "16 valid, 4 corrupt"), "%s", text);
    free(text);
    CHECK(kvt_disk_open(&p, &d) == 0);
    hits = 0;
    for (int i = 0; i < 20; i++) hits += get_ok(d, i, 0);
    kvt_disk_get_stats(d, &st);
    CHECKF(hits == 16 && st.corrupt == 4, "hits %d corrupt %llu", hits, (unsigned long long)st.corrupt);
    kvt_disk_close(d);

    /* no key file: MAC'd records cannot be checked, so they are misses (a new key is made) */
    CHECK(unlink(kvt_test_path(sdir, "key")) == 0);
    CHECK(cli_verify(sdir, &text) == 1);
    CHECKF(text && strstr(text, "20 that cannot be checked (no key file"), "%s", text);
    free(text);
    d = open_foreign(&p, 20);
    hits = 0;
    put_range(d, 30, 35, 0); /* signed with the new key */
    kvt_disk_flush(d);
    kvt_disk_close(d);
    CHECK(lstat(kvt_test_path(sdir, "key"), &sb) == 0 && (sb.st_mode & 07777) == 0600);
    CHECK(kvt_disk_open(&p, &d) == 0);
    CHECK(get_ok(d, 32, 0) && !get_ok(d, 5, 0));
    kvt_disk_get_stats(d, &st);
    CHECK(st.corrupt == 0); /* the old key's records are foreign, not taken for forgeries */
    kvt_disk_close(d);
    /* verify cannot vouch for them; gc drops them like another namespace */
    CHECK(cli_verify(sdir, &text) == 1);
    CHECKF(text && strstr(text, "5 verified") && strstr(text, "20 that cannot be checked"), "%s", text);
    free(text);
    CHECK(kvt_disk_compact(sdir, NULL, &rep) == 0);
    CHECKF(rep.kept == 5 && rep.dropped_foreign == 20, "kept %llu foreign %llu", (unsigned long long)rep.kept,
           (unsigned long long)rep.dropped_foreign);
    CHECK(cli_verify(sdir, &text) == 0);
    free(text);

    /* records written without a MAC are misses for a store that wants one */
    const char *ndir = tagged_dir(ndir_buf, sizeof ndir_buf, "mac-none", tag);
    p = params(ndir);
    p.mac = 0;
    fill(&p, 5);
    CHECK(access(kvt_test_path(ndir, "key"), F_OK) != 0); /* MAC off makes no key */
    memset(&m, 0, sizeof m);
    CHECK(kvt_disk_walk(ndir, 1, mac_walk_fn, &m) == 0 && m.valid == 5 && m.no_mac == 5);
    p.mac = 1;
    CHECK(kvt_disk_open(&p, &d) == 0);
    kvt_disk_get_stats(d, &st);
    CHECK(st.records == 0 && st.foreign == 5 && !get_ok(d, 2, 0));
    kvt_disk_close(d);

    /* a key file others could read or change, of the wrong size, or a link: refused */
    const char *key_path = kvt_test_path(sdir, "key");
    p = params(sdir);
    CHECK(chmod(key_path, 0644) == 0);
    CHECK(kvt_disk_open(&p, &d) == -EACCES);
    CHECKF(strstr(kvt_errmsg(), "chmod 600"), "%s", kvt_errmsg());
    CHECK(cli_verify(sdir, &text) != 0);
    free(text);
    CHECK(chmod(key_path, 0600) == 0 && truncate(key_path, 16) == 0);
    CHECK(kvt_disk_open(&p, &d) == KVT_EFORMAT);
    CHECKF(strstr(kvt_errmsg(), "not 32 bytes"), "%s", kvt_errmsg());
    CHECK(unlink(key_path) == 0 && symlink(subdir("victim.txt"), key_path) == 0);
    CHECK(kvt_disk_open(&p, &d) == -ELOOP);
    CHECK(unlink(key_path) == 0);
    if (geteuid() == 0) {
        CHECK(kvt_disk_open(&p, &d) == 0); /* makes a new key */
        kvt_disk_close(d);
        CHECK(chown(key_path, 65534, 65534) == 0);
        CHECK(kvt_disk_open(&p, &d) == -EACCES);
        CHECKF(strstr(kvt_errmsg(), "key file belongs to uid 65534"), "%s", kvt_errmsg());
    }
}

/* Segment files of dir in FIFO order: the n-th (from 0) into out. */
static int nth_segment(const char *dir, int n, char *out, size_t cap) {
    char names[64][64];
    int k = 0;
    DIR *dh = opendir(dir);
    struct dirent *e;
    while (dh && (e = readdir(dh)) && k < 64)
        if (!strncmp(e->d_name, "seg-", 4) && strlen(e->d_name) < sizeof names[0])
            snprintf(names[k++], 64, "%s", e->d_name);
    if (dh) closedir(dh);
    qsort(names, (size_t)k, sizeof names[0], (int (*)(const void *, const void *))strcmp);
    if (n >= k) return 0;
    snprintf(out, cap, "%s/%s", dir, names[n]);
    return 1;
}

/* Record edits an attacker without the key can make (disk_forge.h fixes the CRCs). */
static void edit_nonce(uint8_t *rec, const kvt_disk_record *r) {
    (void)r;
    rec[FORGE_NONCE] ^= 1;
}
static void edit_flip_scheme(uint8_t *rec, const kvt_disk_record *r) {
    uint32_t f = r->flags ^ (KVT_DISK_SCHEME_GMAC << KVT_DISK_FLAG_SCHEME_SHIFT); /* GMAC <-> BLAKE2b */
    memcpy(rec + FORGE_FLAGS, &f, 4);
}
static void edit_strip_mac(uint8_t *rec, const kvt_disk_record *r) {
    (void)r;
    memset(rec + FORGE_FLAGS, 0, 8); /* flags and key id */
    memset(rec + FORGE_MAC, 0, KVT_DISK_MAC_BYTES);
}
#define SCHEME_UNKNOWN 5u /* no build computes it (yet) */
static void edit_unknown_scheme(uint8_t *rec, const kvt_disk_record *r) {
    uint32_t f = (r->flags & ~KVT_DISK_FLAG_SCHEME_MASK) | SCHEME_UNKNOWN << KVT_DISK_FLAG_SCHEME_SHIFT;
    memcpy(rec + FORGE_FLAGS, &f, 4);
}

typedef struct {
    uint8_t nonce[NBLK][KVT_DISK_GMAC_NONCE_BYTES];
    int n;
} nonce_walk;

static int nonce_walk_fn(void *ctx, const kvt_disk_walk_info *w) {
    nonce_walk *nw = ctx;
    if (!w->status && w->rec.mac_scheme == KVT_DISK_SCHEME_GMAC && nw->n < NBLK)
        memcpy(nw->nonce[nw->n++], w->rec.mac + KVT_DISK_GMAC_TAG_BYTES, KVT_DISK_GMAC_NONCE_BYTES);
    return 0;
}

/* The scheme flag and the nonce are bound like everything else: a record
 * whose GMAC nonce or scheme flag was altered (CRCs recomputed) is refused at
 * read; one stripped of its MAC (a downgrade) or naming a scheme no build
 * computes is a miss. Every GMAC record has a nonce of its own. Where GMAC is
 * computed, a directory holding both schemes serves both, and a process that
 * cannot compute GMAC (KVT_DISK_MAC_SCHEME=blake2b) counts GMAC records
 * foreign, never serves them, cannot verify them, and gc keeps them. */
static void test_mac_scheme(void) {
    int gmac = kvt_disk_mac_scheme_default() == KVT_DISK_SCHEME_GMAC;
    if (!gmac) printf("SKIP part: this CPU has no AES-GCM: records are BLAKE2b, no GMAC cases\n");
    char dir[512], seg[1024];
    snprintf(dir, sizeof dir, "%s", subdir("scheme"));
    kvt_disk_params p = params(dir);
    kvt_disk *d;
    fill(&p, 25); /* 5 records per segment: segment k holds blocks 5k..5k+4 */
    if (gmac) {
        nonce_walk nw = {.n = 0};
        CHECK(kvt_disk_walk(dir, 0, nonce_walk_fn, &nw) == 0);
        CHECKF(nw.n == 25, "%d of 25 records under GMAC", nw.n);
        int repeats = 0;
        for (int i = 0; i < nw.n; i++)
            for (int j = 0; j < i; j++) repeats += !memcmp(nw.nonce[i], nw.nonce[j], KVT_DISK_GMAC_NONCE_BYTES);
        CHECKF(repeats == 0, "%d repeated GMAC nonces", repeats);
    }

    uint8_t key[KVT_DISK_KEY_BYTES];
    FILE *kf = fopen(kvt_test_path(dir, "key"), "rb");
    CHECK(kf && fread(key, 1, sizeof key, kf) == sizeof key);
    if (kf) fclose(kf);
    void (*edits[4])(uint8_t *, const kvt_disk_record *) = {edit_nonce, edit_flip_scheme, edit_strip_mac,
                                                            edit_unknown_scheme};
    for (int k = 0; k < 4; k++) {
        CHECK(nth_segment(dir, k, seg, sizeof seg));
        CHECKF(forge_segment_edit(seg, edits[k]) == 5, "edit %d", k);
    }
    /* the edits themselves, record by record */
    int want_check[4] = {KVT_EFORMAT, gmac ? KVT_EFORMAT : KVT_EUNSUPPORTED, KVT_EFORMAT, KVT_EUNSUPPORTED};
    for (int k = 0; k < 4; k++) {
        CHECK(nth_segment(dir, k, seg, sizeof seg));
        int fd = open(seg, O_RDONLY);
        uint8_t *rec = NULL;
        kvt_disk_record r;
        CHECK(forge_read(fd, 0, &rec, &r) == 0);
        close(fd);
        int rc = rec ? kvt_disk_record_check_mac(&r, key) : 0;
        CHECKF(rc == want_check[k], "edit %d: check_mac %d, want %d", k, rc, want_check[k]);
        free(rec);
    }
    /* altered nonce or scheme: indexed (the header is well formed), refused
     * at read, counted corrupt; stripped or unknown: foreign at open */
    CHECK(kvt_disk_open(&p, &d) == 0);
    kvt_disk_stats st;
    kvt_disk_get_stats(d, &st);
    uint64_t want_foreign = gmac ? 10 : 15; /* without AES-GCM the flipped BLAKE2b records claim GMAC */
    CHECKF(st.foreign == want_foreign && st.records == 25 - want_foreign, "foreign %llu records %llu",
           (unsigned long long)st.foreign, (unsigned long long)st.records);
    int hits = 0;
    for (int i = 0; i < 25; i++) hits += get_ok(d, i, 0);
    kvt_disk_get_stats(d, &st);
    CHECKF(hits == 5 && st.corrupt == 20 - want_foreign, "hits %d corrupt %llu", hits, (unsigned long long)st.corrupt);
    for (int i = 20; i < 25; i++) CHECK(get_ok(d, i, 0)); /* the untouched segment */
    kvt_disk_close(d);
    char *text;
    CHECK(cli_verify(dir, &text) == 1);
    free(text);
    if (!gmac) return;

    /* both schemes in one directory; a process without AES-GCM */
    char mdir[512];
    snprintf(mdir, sizeof mdir, "%s", subdir("scheme-mixed"));
    p = params(mdir);
    fill(&p, 10); /* GMAC */
    CHECK(setenv("KVT_DISK_MAC_SCHEME", "blake2b", 1) == 0);
    CHECK(kvt_disk_mac_scheme_default() == KVT_DISK_SCHEME_BLAKE2B);
    d = open_foreign(&p, 10);
    hits = 0;
    put_range(d, 10, 20, 0); /* BLAKE2b */
    kvt_disk_flush(d);
    for (int i = 10; i < 20; i++) hits += get_ok(d, i, 0);
    kvt_disk_get_stats(d, &st);
    CHECKF(hits == 10 && st.corrupt == 0, "hits %d corrupt %llu", hits, (unsigned long long)st.corrupt);
    kvt_disk_close(d);
    mac_walk m = {0};
    CHECK(kvt_disk_walk(mdir, 1, mac_walk_fn, &m) == 0);
    CHECKF(m.valid == 20 && m.mac_ok == 10 && m.scheme[KVT_DISK_SCHEME_GMAC] == 10 &&
               m.scheme[KVT_DISK_SCHEME_BLAKE2B] == 10,
           "valid %llu verified %llu", (unsigned long long)m.valid, (unsigned long long)m.mac_ok);
    CHECK(cli_verify(mdir, &text) == 1);
    CHECKF(text && strstr(text, "10 that cannot be checked"), "%s", text);
    free(text);
    kvt_disk_gc_report rep;
    CHECK(kvt_disk_compact(mdir, NULL, &rep) == 0);
    CHECKF(rep.kept == 20 && rep.dropped_foreign == 0 && rep.dropped_corrupt == 0, "kept %llu",
           (unsigned long long)rep.kept);
    CHECK(unsetenv("KVT_DISK_MAC_SCHEME") == 0);
    CHECK(kvt_disk_open(&p, &d) == 0);
    hits = 0;
    for (int i = 0; i < 20; i++) hits += get_ok(d, i, 0);
    kvt_disk_get_stats(d, &st);
    CHECKF(hits == 20 && st.corrupt == 0 && st.foreign == 0, "hits %d corrupt %llu foreign %llu", hits,
           (unsigned long long)st.corrupt, (unsigned long long)st.foreign);
    kvt_disk_close(d);
    CHECK(cli_verify(mdir, &text) == 0);
    free(text);
}

static void test_params(void) {
    kvt_disk_params p = params(subdir("params"));
    kvt_disk *d;
    p.size_bytes = SEG;
    CHECK(kvt_disk_open(&p, &d) == KVT_EARG);
    p = params(subdir("params"));
    p.segment_bytes = 4096;
    CHECK(kvt_disk_open(&p, &d) == KVT_EARG);
    p = params(subdir("params"));
    p.payload_bytes = 0;
    CHECK(kvt_disk_open(&p, &d) == KVT_EARG);
}

/* A queued block is in the tier at once: the index, contains and reads find
 * it while the writer is held, and it stays found once written. */
static void test_queue_visible(void) {
    kvt_prefix *idx;
    CHECK(kvt_prefix_new(B, &idx) == 0);
    kvt_disk_params p = params(subdir("queue"));
    p.index = idx;
    p.queue_depth = 16;
    kvt_disk *d;
    CHECK(kvt_disk_open(&p, &d) == 0);
    kvt_disk_pause_writer(d, 1);
    put_range(d, 0, 10, 0);
    kvt_prefix_hit hits[10];
    size_t k = kvt_prefix_lookup(idx, root, toks[0], 10 * B, hits, 10);
    CHECKF(k == 10, "index found %zu of 10 queued blocks", k);
    int served = 0;
    for (int i = 0; i < 10; i++) served += kvt_disk_contains(d, hashes[i]) && get_ok(d, i, 0);
    CHECKF(served == 10, "%d of 10 queued blocks served", served);
    kvt_disk_stats st;
    kvt_disk_get_stats(d, &st);
    CHECKF(st.queue_hits == 10 && st.queued == 10 && st.puts == 0, "queue hits %llu, queued %u, written %llu",
           (unsigned long long)st.queue_hits, st.queued, (unsigned long long)st.puts);
    /* a second put of a queued block is a duplicate, not a second copy */
    uint8_t pay[PAYLOAD];
    fill_payload(hashes[3], pay, 0);
    CHECK(kvt_disk_put(d, hashes[3], parents[3], toks[3], pay) == 1);
    /* a wrong parent or token list is a miss even in the queue */
    int32_t other[B];
    memcpy(other, toks[4], sizeof other);
    other[0]++;
    CHECK(kvt_disk_get(d, hashes[4], parents[4], other, pay) == KVT_ENOTFOUND);
    /* removing a queued block: gone from the index, never written */
    CHECK(kvt_disk_remove(d, hashes[9]) == 0 && !kvt_disk_contains(d, hashes[9]));
    CHECK(kvt_disk_flush(d) == 0);
    kvt_disk_get_stats(d, &st);
    CHECKF(st.puts == 9 && st.dropped == 0, "written %llu, dropped %llu", (unsigned long long)st.puts,
           (unsigned long long)st.dropped);
    k = kvt_prefix_lookup(idx, root, toks[0], 10 * B, hits, 10);
    CHECKF(k == 9, "index found %zu of 9 written blocks", k);
    served = 0;
    for (int i = 0; i < 9; i++) served += get_ok(d, i, 0);
    CHECK(served == 9 && !kvt_disk_contains(d, hashes[9]));
    kvt_disk_close(d);
    kvt_prefix_free(idx);
}

static void *resume_later(void *arg) {
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    kvt_disk_pause_writer(arg, 0);
    return NULL;
}

/* Back-pressure: a put into a full queue waits for the writer instead of
 * dropping; with no wait allowed, the drop is counted. */
static void test_backpressure(void) {
    kvt_disk_params p = params(subdir("backpressure"));
    p.queue_depth = 2;
    p.put_wait_ms = 60000; /* far beyond the writer's 100 ms pause: the put must not give up */
    kvt_disk *d;
    CHECK(kvt_disk_open(&p, &d) == 0);
    uint8_t pay[PAYLOAD];
    kvt_disk_pause_writer(d, 1);
    for (int i = 0; i < 2; i++) {
        fill_payload(hashes[i], pay, 0);
        CHECK(kvt_disk_put(d, hashes[i], parents[i], toks[i], pay) == 0);
    }
    pthread_t t;
    CHECK(pthread_create(&t, NULL, resume_later, d) == 0);
    fill_payload(hashes[2], pay, 0);
    CHECK(kvt_disk_put(d, hashes[2], parents[2], toks[2], pay) == 0); /* waits for room */
    pthread_join(t, NULL);
    CHECK(kvt_disk_flush(d) == 0);
    kvt_disk_stats st;
    kvt_disk_get_stats(d, &st);
    CHECKF(st.put_waits == 1 && st.dropped == 0 && st.puts == 3, "waits %llu, dropped %llu, written %llu",
           (unsigned long long)st.put_waits, (unsigned long long)st.dropped, (unsigned long long)st.puts);
    CHECK(get_ok(d, 0, 0) && get_ok(d, 1, 0) && get_ok(d, 2, 0));
    kvt_disk_close(d);

    p = params(subdir("nowait"));
    p.queue_depth = 1;
    p.put_wait_ms = 0;
    CHECK(kvt_disk_open(&p, &d) == 0);
    kvt_disk_pause_writer(d, 1);
    fill_payload(hashes[0], pay, 0);
    CHECK(kvt_disk_put(d, hashes[0], parents[0], toks[0], pay) == 0);
    fill_payload(hashes[1], pay, 0);
    CHECK(kvt_disk_put(d, hashes[1], parents[1], toks[1], pay) == KVT_ELIMIT);
    kvt_disk_get_stats(d, &st);
    CHECK(st.dropped == 1 && !kvt_disk_contains(d, hashes[1]) && kvt_disk_contains(d, hashes[0]));
    kvt_disk_close(d);
}

int main(void) {
    make_blocks();
    test_params();
    test_roundtrip(KVT_DISK_CODEC_RAW);
    test_roundtrip(KVT_DISK_CODEC_ZSTD);
    test_lock();
    test_corruption();
    test_read_ring(1);
    test_read_ring(0);
    test_read_split();
    test_budget();
    test_crash();
    test_full_and_readonly();
    test_queue_visible();
    test_backpressure();
    test_dir_security();
    /* every MAC test under both schemes: the one this CPU signs with, then the portable one */
    test_mac("default", kvt_disk_mac_scheme_default());
    CHECK(setenv("KVT_DISK_MAC_SCHEME", "blake2b", 1) == 0);
    test_mac("blake2b", KVT_DISK_SCHEME_BLAKE2B);
    CHECK(unsetenv("KVT_DISK_MAC_SCHEME") == 0);
    test_mac_scheme();
    return kvt_test_done("test_tier_disk");
}
