// SPDX-License-Identifier: MIT
/* The remote tier's maintenance (tier_remote.h, `kvtier cache --kv-remote`):
 * per-namespace usage with SCAN and pipelined STRLEN, and clearing one
 * namespace with SCAN MATCH and batched UNLINK. Standalone: a connection of
 * its own, no tier handle. On a cluster, each primary is walked in turn, and
 * keys are unlinked one per command (a command's keys must share a slot). */
#include "remote_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "remote_cluster_internal.h"

/* SCAN COUNT hint, and keys per UNLINK. */
#define SCAN_COUNT 1000
#define UNLINK_BATCH 500

static int parse_hex128(const char *s, kvt_hash128 *out) {
    char part[17];
    char *e;
    memcpy(part, s, 16);
    part[16] = 0;
    out->hi = strtoull(part, &e, 16);
    if (*e) return -1;
    memcpy(part, s + 16, 16);
    out->lo = strtoull(part, &e, 16);
    return *e ? -1 : 0;
}

/* The servers to walk into out (KVT_CL_NODES_MAX): every primary of a
 * cluster, or the one server. */
static int maint_targets(const char *url, const char *password_file, uint32_t timeout_ms, kvt_remote_url *out,
                         size_t *n, int *cluster) {
    kvt_remote_url u;
    int rc = kvt_remote_parse_url_auth(url, password_file, &u);
    if (!rc) rc = kvt_remote_cluster_primaries(&u, timeout_ms / 1e3, out, KVT_CL_NODES_MAX, n);
    *cluster = *n > 0;
    if (!rc && !*n) {
        out[0] = u;
        *n = 1;
    }
    memset(&u, 0, sizeof u);
    return rc;
}

static int maint_connect(const kvt_remote_url *u, const char *url, uint32_t timeout_ms, redisContext **c) {
    char err[256];
    *c = kvt_remote_connect_url(u, timeout_ms / 1e3, err, sizeof err);
    return *c ? 0 : kvt_fail(-EIO, "cannot reach %s (%s:%d): %s", url, u->host, u->port, err);
}

/* One SCAN step over pattern: the next cursor in *cursor (0 at the end) and
 * the reply (caller frees), or NULL after setting the error. */
static redisReply *scan_step(redisContext *c, const char *url, unsigned long long *cursor, const char *pattern) {
    redisReply *rep = redisCommand(c, "SCAN %llu MATCH %s COUNT %d", *cursor, pattern, SCAN_COUNT);
    if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 || rep->element[0]->type != REDIS_REPLY_STRING ||
        rep->element[1]->type != REDIS_REPLY_ARRAY) {
        kvt_fail(-EIO, "%s: SCAN failed: %s", url, rep && rep->type == REDIS_REPLY_ERROR ? rep->str : c->errstr);
        if (rep) freeReplyObject(rep);
        return NULL;
    }
    *cursor = strtoull(rep->element[0]->str, NULL, 10);
    return rep;
}

/* Adds one server's namespaces to out / other (kvt_remote_scan). */
static int scan_server(redisContext *c, const char *url, kvt_remote_ns_usage *out, size_t cap, size_t *n_out,
                       kvt_remote_ns_usage *other) {
    int rc = 0;
    unsigned long long cursor = 0;
    do {
        redisReply *rep = scan_step(c, url, &cursor, KVT_REMOTE_KEY_PREFIX "*");
        if (!rep) {
            rc = -EIO;
            break;
        }
        redisReply *keys = rep->element[1];
        for (size_t i = 0; i < keys->elements; i++) /* sizes in one pipelined round trip */
            redisAppendCommand(c, "STRLEN %b", keys->element[i]->str, keys->element[i]->len);
        for (size_t i = 0; i < keys->elements && !rc; i++) {
            void *v = NULL;
            if (redisGetReply(c, &v) != REDIS_OK) {
                rc = kvt_fail(-EIO, "%s: STRLEN failed: %s", url, c->errstr);
                break;
            }
            redisReply *len = v;
            const char *k = keys->element[i]->str;
            kvt_hash128 ns;
            if (keys->element[i]->len == KVT_REMOTE_KEY_LEN && !parse_hex128(k + strlen(KVT_REMOTE_KEY_PREFIX), &ns) &&
                len->type == REDIS_REPLY_INTEGER) {
                size_t j;
                for (j = 0; j < *n_out; j++)
                    if (kvt_hash128_eq(out[j].ns, ns)) break;
                kvt_remote_ns_usage *u = other;
                if (j < *n_out) u = &out[j];
                else if (*n_out < cap) {
                    u = &out[(*n_out)++];
                    *u = (kvt_remote_ns_usage){.ns = ns};
                }
                u->values++;
                u->bytes += (uint64_t)len->integer;
            }
            freeReplyObject(len);
        }
        freeReplyObject(rep);
    } while (cursor && !rc);
    return rc;
}

int kvt_remote_scan(const char *url, const char *password_file, uint32_t timeout_ms, kvt_remote_ns_usage *out,
                    size_t cap, size_t *n_out, kvt_remote_ns_usage *other) {
    *n_out = 0;
    memset(other, 0, sizeof *other);
    kvt_remote_url *to = kvt_xcalloc(KVT_CL_NODES_MAX, sizeof *to);
    size_t n = 0;
    int cluster, rc = maint_targets(url, password_file, timeout_ms, to, &n, &cluster);
    char shown[4 * KVT_REMOTE_URL_PART_MAX]; /* for messages: no password */
    kvt_remote_url_shown(url, shown, sizeof shown);
    for (size_t i = 0; i < n && !rc; i++) {
        redisContext *c = NULL;
        rc = maint_connect(&to[i], shown, timeout_ms, &c);
        if (!rc) rc = scan_server(c, shown, out, cap, n_out, other);
        if (c) redisFree(c);
    }
    memset(to, 0, KVT_CL_NODES_MAX * sizeof *to);
    free(to);
    return rc;
}

/* Unlinks one server's keys matching pattern, batch keys per UNLINK, the
 * UNLINKs of one SCAN step pipelined. */
static int clear_server(redisContext *c, const char *url, const char *pattern, size_t batch, uint64_t *removed) {
    int rc = 0;
    unsigned long long cursor = 0;
    const char **argv = kvt_xmalloc((batch + 1) * sizeof *argv);
    size_t *len = kvt_xmalloc((batch + 1) * sizeof *len);
    do {
        redisReply *rep = scan_step(c, url, &cursor, pattern);
        if (!rep) {
            rc = -EIO;
            break;
        }
        redisReply *keys = rep->element[1];
        size_t sent = 0;
        for (size_t at = 0; at < keys->elements; at += batch, sent++) {
            size_t k = KVT_MIN(keys->elements - at, batch);
            argv[0] = "UNLINK";
            len[0] = 6;
            for (size_t i = 0; i < k; i++) {
                argv[i + 1] = keys->element[at + i]->str;
                len[i + 1] = keys->element[at + i]->len;
            }
            redisAppendCommandArgv(c, (int)(k + 1), argv, len);
        }
        for (size_t i = 0; i < sent && !rc; i++) {
            void *v = NULL;
            redisReply *u = redisGetReply(c, &v) == REDIS_OK ? v : NULL;
            if (!u || u->type != REDIS_REPLY_INTEGER)
                rc = kvt_fail(-EIO, "%s: UNLINK failed: %s", url,
                              u && u->type == REDIS_REPLY_ERROR ? u->str : c->errstr);
            else *removed += (uint64_t)u->integer;
            if (u) freeReplyObject(u);
        }
        freeReplyObject(rep);
    } while (cursor && !rc);
    free(argv);
    free(len);
    return rc;
}

int kvt_remote_clear(const char *url, const char *password_file, uint32_t timeout_ms, kvt_hash128 ns,
                     uint64_t *removed) {
    *removed = 0;
    char pattern[KVT_REMOTE_KEY_LEN + 1];
    kvt_remote_key(ns, ns, pattern);
    snprintf(pattern + strlen(KVT_REMOTE_KEY_PREFIX) + 33, sizeof pattern - strlen(KVT_REMOTE_KEY_PREFIX) - 33, "*");
    kvt_remote_url *to = kvt_xcalloc(KVT_CL_NODES_MAX, sizeof *to);
    size_t n = 0;
    int cluster, rc = maint_targets(url, password_file, timeout_ms, to, &n, &cluster);
    char shown[4 * KVT_REMOTE_URL_PART_MAX]; /* for messages: no password */
    kvt_remote_url_shown(url, shown, sizeof shown);
    for (size_t i = 0; i < n && !rc; i++) {
        redisContext *c = NULL;
        rc = maint_connect(&to[i], shown, timeout_ms, &c);
        if (!rc) rc = clear_server(c, shown, pattern, cluster ? 1 : UNLINK_BATCH, removed);
        if (c) redisFree(c);
    }
    memset(to, 0, KVT_CL_NODES_MAX * sizeof *to);
    free(to);
    return rc;
}
