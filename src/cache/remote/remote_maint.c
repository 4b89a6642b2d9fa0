// SPDX-License-Identifier: MIT
/* The remote tier's maintenance (tier_remote.h, `kvtier cache --kv-remote`):
 * per-namespace usage with SCAN and pipelined STRLEN, and clearing one
 * namespace with SCAN MATCH and batched UNLINK. Standalone: a connection of
 * its own, no tier handle. */
#include "remote_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

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

static int maint_connect(const char *url, uint32_t timeout_ms, redisContext **c) {
    kvt_remote_url u;
    int rc = kvt_remote_parse_url(url, &u);
    if (rc) return rc;
    char err[256];
    *c = kvt_remote_connect_url(&u, timeout_ms / 1e3, err, sizeof err);
    memset(&u, 0, sizeof u);
    return *c ? 0 : kvt_fail(-EIO, "cannot reach %s: %s", url, err);
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

int kvt_remote_scan(const char *url, uint32_t timeout_ms, kvt_remote_ns_usage *out, size_t cap, size_t *n_out,
                    kvt_remote_ns_usage *other) {
    *n_out = 0;
    memset(other, 0, sizeof *other);
    redisContext *c;
    int rc = maint_connect(url, timeout_ms, &c);
    if (rc) return rc;
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
    redisFree(c);
    return rc;
}

int kvt_remote_clear(const char *url, uint32_t timeout_ms, kvt_hash128 ns, uint64_t *removed) {
    *removed = 0;
    redisContext *c;
    int rc = maint_connect(url, timeout_ms, &c);
    if (rc) return rc;
    char pattern[KVT_REMOTE_KEY_LEN + 1];
    kvt_remote_key(ns, ns, pattern);
    snprintf(pattern + strlen(KVT_REMOTE_KEY_PREFIX) + 33, sizeof pattern - strlen(KVT_REMOTE_KEY_PREFIX) - 33, "*");
    unsigned long long cursor = 0;
    do {
        redisReply *rep = scan_step(c, url, &cursor, pattern);
        if (!rep) {
            rc = -EIO;
            break;
        }
        redisReply *keys = rep->element[1];
        for (size_t at = 0; at < keys->elements && !rc; at += UNLINK_BATCH) {
            size_t k = KVT_MIN(keys->elements - at, (size_t)UNLINK_BATCH);
            const char **argv = kvt_xmalloc((k + 1) * sizeof *argv);
            size_t *len = kvt_xmalloc((k + 1) * sizeof *len);
            argv[0] = "UNLINK";
            len[0] = 6;
            for (size_t i = 0; i < k; i++) {
                argv[i + 1] = keys->element[at + i]->str;
                len[i + 1] = keys->element[at + i]->len;
            }
            redisReply *u = redisCommandArgv(c, (int)(k + 1), argv, len);
            if (!u || u->type != REDIS_REPLY_INTEGER)
                rc = kvt_fail(-EIO, "%s: UNLINK failed: %s", url,
                              u && u->type == REDIS_REPLY_ERROR ? u->str : c->errstr);
            else *removed += (uint64_t)u->integer;
            if (u) freeReplyObject(u);
            free(argv);
            free(len);
        }
        freeReplyObject(rep);
    } while (cursor && !rc);
    redisFree(c);
    return rc;
}
