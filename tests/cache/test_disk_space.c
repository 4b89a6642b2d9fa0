// SPDX-License-Identifier: MIT
/* Disk tier on a full disk that frees up again: on a small tmpfs, writes
 * stop at ENOSPC with one warning while every stored record stays readable,
 * the writer checks the free space on its own, and once a filler file is
 * removed writes resume (one line), new blocks land, and after a reopen
 * nothing written before, during or after is lost. Needs to mount a tmpfs
 * (root); skips otherwise. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blockhash.h"
#include "common.h"
#include "testutil.h"
#include "tier_disk.h"

#include "disk_blocks.h"

#define FS_SIZE "size=512k"
#define FILLER_BYTES (256 * 1024)
#define RETRY_S 0.05
#define AFTER 8 /* blocks put once writes resumed */

/* Counts the occurrences of what in file. */
static int count_in(const char *path, const char *what) {
    size_t n;
    char *s = kvt_test_read_file(path, &n);
    int c = 0;
    for (char *q = s; q && (q = strstr(q, what)); q++) c++;
    free(s);
    return c;
}

static int write_filler(const char *path) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    static char chunk[4096];
    memset(chunk, 0x5a, sizeof chunk);
    int ok = fd >= 0;
    for (int i = 0; ok && i < FILLER_BYTES / (int)sizeof chunk; i++)
        ok = write(fd, chunk, sizeof chunk) == (ssize_t)sizeof chunk;
    if (fd >= 0) close(fd);
    return ok;
}

/* Puts blocks from 0 until the disk is full; returns the first block that was not stored. */
static int fill_disk(kvt_disk *d) {
    uint8_t pay[PAYLOAD];
    for (int i = 0; i < NBLK - AFTER; i++) {
        fill_payload(hashes[i], pay, 0);
        int rc = kvt_disk_put(d, hashes[i], parents[i], toks[i], pay);
        if (rc == KVT_EUNSUPPORTED) return i;
        CHECKF(rc == 0, "put %d: %d", i, rc);
        if (kvt_disk_flush(d)) return i; /* this one hit the full disk */
    }
    return -1;
}

/* Polls the store until writes resume; 1 if they did within 60 s. */
static int wait_resumed(kvt_disk *d) {
    kvt_disk_stats st;
    for (int i = 0; i < 3000; i++) {
        kvt_disk_get_stats(d, &st);
        if (!st.out_of_space) return 1;
        usleep(20000);
    }
    return 0;
}

int main(void) {
    make_blocks();
    const char *mnt = subdir("small-fs");
    mkdir(mnt, 0755);
    if (mount("tmpfs", mnt, "tmpfs", 0, FS_SIZE)) kvt_test_skip("cannot mount a small tmpfs (not root?)");
    const char *dir = subdir("small-fs/cache"), *filler = subdir("small-fs/filler"), *log = subdir("space.log");
    CHECK(write_filler(filler));
    kvt_disk_params p = params(dir);
    p.space_retry_s = RETRY_S;
    kvt_disk *d;
    CHECK(kvt_disk_open(&p, &d) == 0);
    fflush(stderr);
    int saved = dup(2), lf = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(lf, 2);

    int stored = fill_disk(d);
    kvt_disk_stats st;
    kvt_disk_get_stats(d, &st);
    CHECKF(stored > 0 && st.out_of_space && st.writes_disabled && st.space_pauses == 1 && st.records == (uint64_t)stored,
           "stored %d out_of_space %d disabled %d pauses %llu records %llu", stored, st.out_of_space,
           st.writes_disabled, (unsigned long long)st.space_pauses, (unsigned long long)st.records);
    int hits = 0;
    for (int i = 0; i < stored; i++) hits += get_ok(d, i, 0);
    CHECKF(hits == stored, "%d of %d readable while the disk is full", hits, stored);
    uint8_t pay[PAYLOAD];
    fill_payload(hashes[NBLK - 1], pay, 0);
    CHECK(kvt_disk_put(d, hashes[NBLK - 1], parents[NBLK - 1], toks[NBLK - 1], pay) == KVT_EUNSUPPORTED);

    CHECK(unlink(filler) == 0);
    CHECK(wait_resumed(d));
    kvt_disk_get_stats(d, &st);
    CHECK(!st.writes_disabled && st.space_resumes == 1 && st.space_pauses == 1);
    put_range(d, NBLK - AFTER, NBLK, 0);
    CHECK(kvt_disk_flush(d) == 0);
    hits = 0;
    for (int i = 0; i < stored; i++) hits += get_ok(d, i, 0);
    for (int i = NBLK - AFTER; i < NBLK; i++) hits += get_ok(d, i, 0);
    CHECKF(hits == stored + AFTER, "%d of %d readable after writes resumed", hits, stored + AFTER);

    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(lf);
    CHECKF(count_in(log, "writes disabled until space is free again") == 1, "%d stop lines",
           count_in(log, "writes disabled until space is free again"));
    CHECKF(count_in(log, "writes resumed") == 1, "%d resume lines", count_in(log, "writes resumed"));
    kvt_disk_close(d);

    /* a reopen finds every record: before the full disk and after it */
    CHECK(kvt_disk_open(&p, &d) == 0);
    kvt_disk_get_stats(d, &st);
    CHECKF(st.records == (uint64_t)(stored + AFTER), "records %llu, want %d", (unsigned long long)st.records,
           stored + AFTER);
    hits = 0;
    for (int i = 0; i < stored; i++) hits += get_ok(d, i, 0);
    for (int i = NBLK - AFTER; i < NBLK; i++) hits += get_ok(d, i, 0);
    CHECK(hits == stored + AFTER);
    kvt_disk_close(d);
    umount(mnt);
    return kvt_test_done("test_disk_space");
}
