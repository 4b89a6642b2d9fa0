// SPDX-License-Identifier: MIT
/* The reply journal (reply_journal.h): replay at start, appends, rewrites. */
#include "reply_journal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "crc32c.h"
#include "log.h"
#include "tier_disk.h"

#define HEAD_BYTES 40
#define HEAD_SIGNED 36 /* the head's bytes before its CRC: every record's MAC covers them */
#define HEAD_MAGIC "kvtrjrnl"
#define FORMAT_VERSION 2u /* 1: records with a CRC alone, never trusted now */
#define MAC_BYTES KVT_DISK_MAC_BYTES
#define SCHEME_NONE 0xffffffffu /* the head's scheme when records carry no MAC (--kv-disk-no-mac) */
#define FILE_MAX (1ull << 32)   /* a longer file is not read: the map never needs that much */

struct kvt_reply_journal {
    pthread_mutex_t mu;
    kvt_disk *disk;
    kvt_reply_map *map;
    kvt_disk_record_key *key; /* the directory's, which signs every record; NULL: CRC only (MAC off) */
    uint8_t head[HEAD_BYTES]; /* the head this process writes */
    size_t cap;               /* the map's capacity */
    size_t records;           /* in the file now */
    int fd;                   /* for appending; -1 once writing failed */
};

/* k NULL: unsigned records, scheme SCHEME_NONE and key id 0. */
static void head_write(uint8_t *h, kvt_hash128 ns, const kvt_disk_record_key *k) {
    memcpy(h, HEAD_MAGIC, 8);
    kvt_wr32le(h + 8, FORMAT_VERSION);
    kvt_wr64le(h + 12, ns.hi);
    kvt_wr64le(h + 20, ns.lo);
    kvt_wr32le(h + 28, k ? kvt_disk_key_scheme(k) : SCHEME_NONE);
    kvt_wr32le(h + 32, k ? kvt_disk_key_ident(k) : 0);
    kvt_wr32le(h + HEAD_SIGNED, kvt_crc32c(0, h, HEAD_SIGNED));
}

/* The bytes a record's MAC covers: the head's signed part, then the record
 * rec[0..n) (malloc'd). The head binds the record to this file's format,
 * model, scheme and key: it cannot pass for another journal's record or for
 * a T2 record, whose bytes begin otherwise. */
static uint8_t *signed_bytes(const uint8_t *head, const uint8_t *rec, size_t n) {
    uint8_t *b = kvt_xmalloc(HEAD_SIGNED + n);
    memcpy(b, head, HEAD_SIGNED);
    memcpy(b + HEAD_SIGNED, rec, n);
    return b;
}

/* The bytes of the MAC field after each record of a file whose head is h. */
static size_t mac_bytes(const uint8_t *h) { return kvt_rd32le(h + 28) == SCHEME_NONE ? 0 : MAC_BYTES; }

/* Writes the record rec[0..n) and its MAC field, if this file signs, to out
 * (n + mac_bytes(j->head)). */
static void record_sign(const kvt_reply_journal *j, const uint8_t *rec, size_t n, uint8_t *out) {
    memmove(out, rec, n);
    if (!j->key) return;
    uint8_t *b = signed_bytes(j->head, rec, n);
    kvt_disk_mac(j->key, b, HEAD_SIGNED + n, out + n);
    free(b);
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
    size_t count, n = kvt_reply_map_dump(j->map, &recs, &count), out = HEAD_BYTES;
    size_t mac = mac_bytes(j->head);
    uint8_t *buf = kvt_xmalloc(HEAD_BYTES + n + count * mac);
    memcpy(buf, j->head, HEAD_BYTES);
    for (size_t at = 0; at < n;) { /* the dump's records are whole: their lengths are the map's own */
        size_t len = KVT_REPLY_RECORD_HEAD + kvt_rd32le(recs + at);
        record_sign(j, recs + at, len, buf + out);
        at += len;
        out += len + mac;
    }
    free(recs);
    if (j->fd >= 0) close(j->fd);
    j->fd = -1;
    int rc = kvt_disk_side_replace(j->disk, KVT_REPLY_JOURNAL_NAME, buf, out);
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

/* What a journal's head says about its records. */
enum { HEAD_OK, HEAD_DAMAGED, HEAD_VERSION, HEAD_UNSIGNED, HEAD_KEY, HEAD_SCHEME };

/* Checks the head of buf[0..n) (a file) against key k: HEAD_* and, but for
 * HEAD_OK, *why. Another key is a copy from another directory, or a key file
 * made anew; another version (1: records with a CRC alone, which anyone who
 * can write the directory can forge) is never trusted either, nor, with a
 * key, are unsigned records (written under --kv-disk-no-mac). With k NULL
 * (MAC off: the operator trusts the directory, as T2 then takes its records
 * on their CRCs) only the head's own shape is checked: the records' MACs, if
 * any, are not. */
static int head_check(const uint8_t *buf, size_t n, const kvt_disk_record_key *k, const char **why) {
    if (n < 12) return *why = "shorter than its head", HEAD_DAMAGED;
    if (memcmp(buf, HEAD_MAGIC, 8)) return *why = "not a reply journal", HEAD_DAMAGED;
    uint32_t version = kvt_rd32le(buf + 8); /* before the length: format 1's head is shorter */
    if (version != FORMAT_VERSION)
        return *why = version == 1 ? "format version 1, whose records carry no MAC" : "another format version",
               HEAD_VERSION;
    if (n < HEAD_BYTES) return *why = "shorter than its head", HEAD_DAMAGED;
    if (kvt_rd32le(buf + HEAD_SIGNED) != kvt_crc32c(0, buf, HEAD_SIGNED))
        return *why = "not a reply journal", HEAD_DAMAGED;
    if (!k) return HEAD_OK;
    if (kvt_rd32le(buf + 28) == SCHEME_NONE)
        return *why = "written under --kv-disk-no-mac: its records carry no MAC, which this directory's key calls for",
               HEAD_UNSIGNED;
    if (kvt_rd32le(buf + 32) != kvt_disk_key_ident(k))
        return *why = "signed under another directory's key (copied from elsewhere, or the key file was made anew)",
               HEAD_KEY;
    uint32_t scheme = kvt_rd32le(buf + 28);
    if (scheme != KVT_DISK_SCHEME_BLAKE2B && scheme != kvt_disk_key_scheme(k))
        return *why = "signed with a MAC scheme this machine cannot compute", HEAD_SCHEME;
    return HEAD_OK;
}

/* What walk_records found. */
typedef struct {
    size_t records, good; /* records delimited, and those put */
    size_t bad_at;        /* offset in the file of the first bad one (records > good) */
    char why[160];        /* what is wrong with it, or "" */
} walk_result;

/* Checks the record at p[0..left) (the file's head is h): 0 and its length
 * with its MAC field in *len, or what is wrong (*len 0 when its length
 * cannot be trusted to find the next record). The MAC is checked under k;
 * k NULL: the CRC alone. */
static const char *record_check(const kvt_disk_record_key *k, const uint8_t *h, const uint8_t *p, size_t left,
                                size_t *len) {
    size_t mac = mac_bytes(h);
    *len = 0;
    if (left < KVT_REPLY_RECORD_HEAD + mac) return "a record cut short";
    size_t body = kvt_rd32le(p);
    if (body > left - KVT_REPLY_RECORD_HEAD - mac) return "a record cut short";
    size_t n = KVT_REPLY_RECORD_HEAD + body;
    *len = n + mac;
    /* a torn or flipped record (an accident) is told from one signed otherwise (intent) by its CRC */
    if (kvt_crc32c(0, p + KVT_REPLY_RECORD_HEAD, body) != kvt_rd32le(p + 4)) return "a bad checksum";
    if (!k) return NULL;
    if (!mac) return "no MAC field"; /* head_check keeps such a file from a key: never trusted with one */
    uint8_t *b = signed_bytes(h, p, n);
    int rc = kvt_disk_mac_check(k, kvt_rd32le(h + 28), b, HEAD_SIGNED + n, p + n);
    free(b);
    return rc ? "a MAC that does not verify: altered, or not written by this directory's server" : NULL;
}

/* Puts the records after the head of buf[0..n) (head_check said HEAD_OK)
 * into m while each verifies; with all, goes on past a bad one whose length
 * holds, to count the rest (kvtier cache verify), else stops at it. */
static walk_result walk_records(const kvt_disk_record_key *k, const uint8_t *buf, size_t n, kvt_reply_map *m,
                                int32_t n_vocab, int all) {
    walk_result r = {0};
    for (size_t at = HEAD_BYTES, len; at < n; at += len) {
        const char *why = record_check(k, buf, buf + at, n - at, &len);
        size_t used, count;
        if (!why && kvt_reply_map_replay(m, buf + at, len - mac_bytes(buf), n_vocab, &used, &count)) why = kvt_errmsg();
        r.records++;
        if (!why) {
            r.good++;
        } else if (!r.why[0]) {
            snprintf(r.why, sizeof r.why, "%s", why);
            r.bad_at = at;
        }
        if (why && (!all || !len)) break;
    }
    return r;
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
    size_t n;
    int rc = kvt_disk_fd_read_all(fd, FILE_MAX, &buf, &n);
    close(fd);
    const char *why = rc == -EFBIG ? "larger than any journal" : rc ? strerror(-rc) : NULL;
    int head = rc ? HEAD_DAMAGED : head_check(buf, n, j->key, &why);
    if (head == HEAD_DAMAGED) {
        kvt_logk(KVT_LOG_WARN, "dir,file,error", "serve: reply journal %s/%s not read (%s); starting a fresh one", dir,
                 nm, why);
    } else if (head != HEAD_OK) {
        kvt_logk(KVT_LOG_INFO, "dir,file,reason", "serve: reply journal %s/%s: %s: not replayed; starting a fresh one",
                 dir, nm, why);
    } else if (memcmp(j->head + 12, buf + 12, 16)) {
        kvt_logk(KVT_LOG_INFO, "dir,file",
                 "serve: reply journal %s/%s was written for another model: its replies are not used; "
                 "starting a fresh one",
                 dir, nm);
    } else {
        walk_result r = walk_records(j->key, buf, n, j->map, n_vocab, 0);
        if (r.why[0])
            kvt_logk(KVT_LOG_WARN, "dir,file,offset,error,replies",
                     "serve: reply journal %s/%s: damaged record at offset %zu (%s): replay stops there, "
                     "%zu replies kept; the file is rewritten without it",
                     dir, nm, r.bad_at, r.why, r.good);
        else
            kvt_logk(KVT_LOG_INFO, "dir,file,records", "serve: reply journal %s/%s: %zu replies replayed%s", dir, nm,
                     r.good,
                     j->key               ? ""
                         : mac_bytes(buf) ? " (on their CRCs: --kv-disk-no-mac, their MACs not checked)"
                                          : " (on their CRCs: --kv-disk-no-mac)");
    }
    free(buf);
}

kvt_reply_journal *kvt_reply_journal_open(kvt_cache *c, kvt_reply_map *m, size_t cap, int32_t n_vocab) {
    kvt_disk *d = kvt_cache_disk(c);
    kvt_hash128 ns;
    if (!d || kvt_cache_root(c, NULL, 0, &ns)) return NULL;
    kvt_disk_record_key *key = kvt_disk_side_key(d);
    /* MAC off: the operator trusts the directory, so the journal, like T2, keeps records with a CRC alone. MAC
     * on without a key (none could be made): nothing can be written or trusted, T2's records included */
    if (!key && !kvt_disk_mac_off(d)) {
        kvt_logk(KVT_LOG_INFO, "dir",
                 "serve: reply journal: %s has no MAC key (no key file could be made): replies are not kept "
                 "across a restart",
                 kvt_disk_path(d));
        return NULL;
    }
    kvt_reply_journal *j = kvt_xcalloc(1, sizeof *j);
    pthread_mutex_init(&j->mu, NULL);
    j->disk = d;
    j->map = m;
    j->key = key;
    head_write(j->head, ns, key);
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
    size_t total = n + mac_bytes(j->head);
    uint8_t *signed_rec = kvt_xmalloc(total);
    record_sign(j, rec, n, signed_rec);
    pthread_mutex_lock(&j->mu);
    if (j->fd >= 0) {
        /* one write per record: a kill -9 leaves whole records; only a power
         * loss can tear one, which the next start's CRC check drops */
        ssize_t w = write(j->fd, signed_rec, total);
        if (w != (ssize_t)total) write_failed(j, w < 0 ? strerror(errno) : "short write");
        else if (++j->records > 2 * j->cap) rewrite(j);
    }
    pthread_mutex_unlock(&j->mu);
    free(signed_rec);
}

void kvt_reply_journal_free(kvt_reply_journal *j) {
    if (!j) return;
    if (j->fd >= 0) close(j->fd);
    kvt_disk_record_key_free(j->key);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

int kvt_reply_journal_verify(const char *dir, kvt_reply_journal_report *out) {
    memset(out, 0, sizeof *out);
    uint8_t *buf;
    size_t n;
    int rc = kvt_disk_side_read(dir, KVT_REPLY_JOURNAL_NAME, FILE_MAX, &buf, &n);
    if (rc == -ENOENT) return KVT_ENOTFOUND;
    if (rc) { /* a link, a FIFO, a file too large: never followed or read, and a problem */
        snprintf(out->why, sizeof out->why, "%s", kvt_errmsg());
        return out->problem = 1, 0;
    }
    out->bytes = n;
    kvt_disk_record_key *k = NULL;
    const char *why = NULL;
    int krc = kvt_disk_key_read(dir, &k);
    /* unsigned records (--kv-disk-no-mac) are checked on their CRCs; they are good where the directory has no
     * key file, as T2's records without a MAC are, and not where it has one: a server with MAC on never reads them */
    int head = head_check(buf, n, NULL, &why);
    out->unsigned_records = head == HEAD_OK && !mac_bytes(buf);
    if (out->unsigned_records) {
        if (krc == 0)
            why = "no MAC though the directory has a key file (written under --kv-disk-no-mac): a server with MAC on "
                  "never replays it";
        else if (krc != KVT_ENOTFOUND) why = kvt_errmsg();
    } else if (head == HEAD_OK && krc) {
        why = krc == KVT_ENOTFOUND ? "no key file in the directory: its records cannot be checked" : kvt_errmsg();
    } else if (head == HEAD_OK) {
        head = head_check(buf, n, k, &why);
    }
    if (head == HEAD_OK && (!why || out->unsigned_records)) {
        kvt_reply_map *m = kvt_reply_map_new(1, FILE_MAX / 4); /* decodes each record, keeps none */
        walk_result r = walk_records(out->unsigned_records ? NULL : k, buf, n, m, 0, 1);
        kvt_reply_map_free(m);
        out->records = r.records;
        out->good = r.good;
        out->bad_at = r.bad_at;
        if (r.why[0]) snprintf(out->why, sizeof out->why, "%s", r.why);
    }
    /* another format version is the next start's to replace, as T2 skips records of another version */
    if (why && !(out->unsigned_records && out->why[0])) snprintf(out->why, sizeof out->why, "%s", why);
    out->problem = out->why[0] && head != HEAD_VERSION;
    out->old_format = head == HEAD_VERSION;
    kvt_disk_record_key_free(k);
    free(buf);
    return 0;
}
