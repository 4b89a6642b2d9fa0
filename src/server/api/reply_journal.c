// SPDX-License-Identifier: MIT
/* The reply journal (reply_journal.h): replay at start, appends, rewrites. */
#include "reply_journal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "crc32c.h"
#include "log.h"
#include "tier_disk.h"

#define HEAD_BYTES 32
#define HEAD_MAGIC "kvtrjrnl"
#define FORMAT_VERSION 1u
#define FILE_MAX (1ull << 32) /* a longer file is not read: the map never needs that much */

struct kvt_reply_journal {
    pthread_mutex_t mu;
    kvt_disk *disk;
    kvt_reply_map *map;
    kvt_hash128 ns;
    size_t cap;     /* the map's capacity */
    size_t records; /* in the file now */
    int fd;         /* for appending; -1 once writing failed */
};

static void head_write(uint8_t *h, kvt_hash128 ns) {
    memcpy(h, HEAD_MAGIC, 8);
    kvt_wr32le(h + 8, FORMAT_VERSION);
    kvt_wr64le(h + 12, ns.hi);
    kvt_wr64le(h + 20, ns.lo);
    kvt_wr32le(h + 28, kvt_crc32c(0, h, 28));
}

/* Turns persistence off after a failure (mu held): one warning. */
static void write_failed(kvt_reply_journal *j, const char *what) {
    kvt_logk(KVT_LOG_WARN, "dir,file,error",
             "serve: reply journal %s/%s: %s: replies are no longer kept across a restart by this process",
             kvt_disk_path(j->disk), KVT_REPLY_JOURNAL_NAME, what);
    if (j->fd >= 0) close(j->fd);
    j->fd = -1;
}

/* Writes the file afresh from the map and opens it for appending (mu held,
 * or not yet shared). Returns 0, or -1 with persistence off. */
static int rewrite(kvt_reply_journal *j) {
    uint8_t *recs;
    size_t count, n = kvt_reply_map_dump(j->map, &recs, &count);
    uint8_t *buf = kvt_xmalloc(HEAD_BYTES + n);
    head_write(buf, j->ns);
    memcpy(buf + HEAD_BYTES, recs, n);
    free(recs);
    if (j->fd >= 0) close(j->fd);
    j->fd = -1;
    int rc = kvt_disk_side_replace(j->disk, KVT_REPLY_JOURNAL_NAME, buf, HEAD_BYTES + n);
    free(buf);
    if (!rc) rc = j->fd = kvt_disk_side_open(j->disk, KVT_REPLY_JOURNAL_NAME, O_WRONLY | O_APPEND);
    if (rc < 0) {
        j->fd = -1;
        write_failed(j, kvt_errmsg());
        return -1;
    }
    j->records = count;
    return 0;
}

/* Reads the whole file at fd into a malloc'd *buf. Returns its bytes, or -1
 * with *why. */
static long long read_all(int fd, uint8_t **buf, const char **why) {
    struct stat sb;
    *buf = NULL;
    if (fstat(fd, &sb)) return *why = strerror(errno), -1;
    if ((unsigned long long)sb.st_size > FILE_MAX) return *why = "larger than any journal", -1;
    size_t n = (size_t)sb.st_size, at = 0;
    *buf = kvt_xmalloc(n ? n : 1);
    while (at < n) {
        ssize_t r = pread(fd, *buf + at, n - at, (off_t)at);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break; /* shorter than fstat said: read what is there */
        at += (size_t)r;
    }
    return (long long)at;
}

/* Replays the file into the map, saying in the log what was not used. */
static void replay(kvt_reply_journal *j, int32_t n_vocab) {
    const char *dir = kvt_disk_path(j->disk), *nm = KVT_REPLY_JOURNAL_NAME;
    int fd = kvt_disk_side_open(j->disk, nm, O_RDONLY);
    if (fd == -ENOENT) return;
    if (fd < 0) {
        kvt_logk(KVT_LOG_WARN, "error", "serve: reply journal not read (%s); starting a fresh one", kvt_errmsg());
        return;
    }
    uint8_t *buf;
    const char *why = NULL;
    long long n = read_all(fd, &buf, &why);
    close(fd);
    uint8_t ours[HEAD_BYTES]; /* the head this process writes: magic, version, namespace */
    head_write(ours, j->ns);
    if (n >= 0 && n < HEAD_BYTES) why = "shorter than its head";
    else if (n >= 0 && (memcmp(buf, HEAD_MAGIC, 8) || kvt_rd32le(buf + 28) != kvt_crc32c(0, buf, 28)))
        why = "not a reply journal";
    else if (n >= 0 && kvt_rd32le(buf + 8) != FORMAT_VERSION) why = "another format version";
    if (why) {
        kvt_logk(KVT_LOG_WARN, "dir,file,error", "serve: reply journal %s/%s not read (%s); starting a fresh one", dir,
                 nm, why);
    } else if (memcmp(ours + 12, buf + 12, 16)) {
        kvt_logk(KVT_LOG_INFO, "dir,file",
                 "serve: reply journal %s/%s was written for another model: its replies are not used; "
                 "starting a fresh one",
                 dir, nm);
    } else {
        size_t used, count;
        if (kvt_reply_map_replay(j->map, buf + HEAD_BYTES, (size_t)n - HEAD_BYTES, n_vocab, &used, &count))
            kvt_logk(KVT_LOG_WARN, "dir,file,offset,error,replies",
                     "serve: reply journal %s/%s: damaged record at offset %zu (%s): replay stops there, "
                     "%zu replies kept; the file is rewritten without it",
                     dir, nm, (size_t)HEAD_BYTES + used, kvt_errmsg(), count);
        else
            kvt_logk(KVT_LOG_INFO, "dir,file,records", "serve: reply journal %s/%s: %zu replies replayed", dir, nm,
                     count);
    }
    free(buf);
}

kvt_reply_journal *kvt_reply_journal_open(kvt_cache *c, kvt_reply_map *m, size_t cap, int32_t n_vocab) {
    kvt_disk *d = kvt_cache_disk(c);
    kvt_hash128 ns;
    if (!d || kvt_cache_root(c, NULL, 0, &ns)) return NULL;
    kvt_reply_journal *j = kvt_xcalloc(1, sizeof *j);
    pthread_mutex_init(&j->mu, NULL);
    j->disk = d;
    j->map = m;
    j->ns = ns;
    j->cap = KVT_MAX(cap, 1);
    j->fd = -1;
    replay(j, n_vocab);
    if (rewrite(j)) {
        kvt_reply_journal_free(j);
        return NULL;
    }
    return j;
}

void kvt_reply_journal_append(kvt_reply_journal *j, const uint8_t *rec, size_t n) {
    if (!j || !n) return;
    pthread_mutex_lock(&j->mu);
    if (j->fd >= 0) {
        /* one write per record: a kill -9 leaves whole records; only a power
         * loss can tear one, which the next start's CRC check drops */
        ssize_t w = write(j->fd, rec, n);
        if (w != (ssize_t)n) write_failed(j, w < 0 ? strerror(errno) : "short write");
        else if (++j->records > 2 * j->cap) rewrite(j);
    }
    pthread_mutex_unlock(&j->mu);
}

void kvt_reply_journal_free(kvt_reply_journal *j) {
    if (!j) return;
    if (j->fd >= 0) close(j->fd);
    pthread_mutex_destroy(&j->mu);
    free(j);
}
