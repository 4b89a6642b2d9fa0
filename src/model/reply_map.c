// SPDX-License-Identifier: MIT
/* The reply map (chat.h): (salt, reply text) -> the token ids kvtier
 * generated, a bounded FIFO ring, and its entries as records, so that a
 * server can keep it in a journal across restarts. */
#include "chat.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "common.h"
#include "crc32c.h"

typedef struct {
    XXH128_hash_t key;        /* of salt and text; text is compared too, so a collision is a miss */
    XXH128_hash_t split_key;  /* of salt, reasoning and answer (reasoning != NULL) */
    XXH128_hash_t answer_key; /* of salt and answer (reasoning != NULL) */
    char *text;
    char *reasoning, *answer; /* the reply as a client got it split, or both NULL */
    char *session;            /* the session whose request generated it, or NULL */
    int32_t *ids;
    size_t n;
} reply_entry;

struct kvt_reply_map {
    pthread_mutex_t mu;
    reply_entry *ring; /* FIFO: the oldest entry is overwritten first */
    size_t cap, next, max_ids;
};

kvt_reply_map *kvt_reply_map_new(size_t max_entries, size_t max_ids) {
    kvt_reply_map *m = kvt_xcalloc(1, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    m->cap = KVT_MAX(max_entries, 1);
    m->ring = kvt_xcalloc(m->cap, sizeof *m->ring);
    m->max_ids = max_ids;
    return m;
}

static void entry_clear(reply_entry *e) {
    free(e->text);
    free(e->reasoning);
    free(e->answer);
    free(e->session);
    free(e->ids);
}

void kvt_reply_map_free(kvt_reply_map *m) {
    if (!m) return;
    for (size_t i = 0; i < m->cap; i++) entry_clear(&m->ring[i]);
    free(m->ring);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

/* The key of salt and the strings a (and b, when not NULL) under kind: every
 * part goes in with its length first, so no two parts can trade bytes. */
static XXH128_hash_t reply_key_of(const void *salt, size_t salt_len, char kind, const char *a, const char *b) {
    XXH3_state_t *st = XXH3_createState();
    XXH3_128bits_reset(st);
    uint64_t sl = salt_len;
    XXH3_128bits_update(st, &sl, sizeof sl);
    if (salt_len) XXH3_128bits_update(st, salt, salt_len);
    if (kind) XXH3_128bits_update(st, &kind, 1);
    const char *parts[2] = {a, b};
    for (size_t i = 0; i < 2 && parts[i]; i++) {
        uint64_t pl = strlen(parts[i]);
        if (kind) XXH3_128bits_update(st, &pl, sizeof pl);
        XXH3_128bits_update(st, parts[i], pl);
    }
    XXH128_hash_t h = XXH3_128bits_digest(st);
    XXH3_freeState(st);
    return h;
}

static XXH128_hash_t reply_key(const void *salt, size_t salt_len, const char *text) {
    return reply_key_of(salt, salt_len, 0, text, NULL);
}

void kvt_reply_map_put(kvt_reply_map *m, const void *salt, size_t salt_len, const char *text, const int32_t *ids,
                       size_t n) {
    kvt_reply_map_put_split(m, salt, salt_len, text, NULL, NULL, ids, n);
}

void kvt_reply_map_put_split(kvt_reply_map *m, const void *salt, size_t salt_len, const char *text,
                             const char *reasoning, const char *answer, const int32_t *ids, size_t n) {
    kvt_reply_owner o = {salt, salt_len, NULL};
    kvt_reply_map_put_by(m, &o, text, reasoning, answer, ids, n);
}

/* Puts the entry e (its strings and ids owned by the map from now on) as the
 * newest, dropping the oldest when the ring is full. */
static void entry_insert(kvt_reply_map *m, reply_entry *ne) {
    pthread_mutex_lock(&m->mu);
    reply_entry *e = &m->ring[m->next];
    m->next = (m->next + 1) % m->cap;
    reply_entry old = *e;
    *e = *ne;
    pthread_mutex_unlock(&m->mu);
    entry_clear(&old);
}

static size_t entry_record_bytes(const reply_entry *e);
static void entry_record(const reply_entry *e, uint8_t *out);

size_t kvt_reply_map_put_rec(kvt_reply_map *m, const kvt_reply_owner *o, const char *text, const char *reasoning,
                             const char *answer, const int32_t *ids, size_t n, uint8_t **rec) {
    if (rec) *rec = NULL;
    if (!n || n > m->max_ids || !*text) return 0;
    reply_entry ne = {.key = reply_key(o->salt, o->salt_len, text), .text = kvt_xstrdup(text), .n = n};
    if (o->session && *o->session) ne.session = kvt_xstrdup(o->session);
    if (reasoning && answer) {
        ne.split_key = reply_key_of(o->salt, o->salt_len, 's', reasoning, answer);
        ne.answer_key = reply_key_of(o->salt, o->salt_len, 'a', answer, NULL);
        ne.reasoning = kvt_xstrdup(reasoning);
        ne.answer = kvt_xstrdup(answer);
    }
    ne.ids = kvt_xmalloc(n * sizeof *ne.ids);
    memcpy(ne.ids, ids, n * sizeof *ne.ids);
    size_t bytes = 0;
    if (rec) {
        bytes = entry_record_bytes(&ne);
        *rec = kvt_xmalloc(bytes);
        entry_record(&ne, *rec);
    }
    entry_insert(m, &ne);
    return bytes;
}

void kvt_reply_map_put_by(kvt_reply_map *m, const kvt_reply_owner *o, const char *text, const char *reasoning,
                          const char *answer, const int32_t *ids, size_t n) {
    kvt_reply_map_put_rec(m, o, text, reasoning, answer, ids, n, NULL);
}

/* Whether e is the reply of key k: text (match 0), reasoning and answer
 * (match 1), or answer alone with some reasoning (match 2). */
static int entry_is(const reply_entry *e, int match, XXH128_hash_t k, const char *text, const char *reasoning) {
    if (!e->text) return 0;
    if (match == 0) return XXH128_isEqual(e->key, k) && !strcmp(e->text, text);
    if (!e->answer || !XXH128_isEqual(match == 1 ? e->split_key : e->answer_key, k) || strcmp(e->answer, text))
        return 0;
    return match == 2 || !strcmp(e->reasoning, reasoning);
}

/* The newest entry of key k (see entry_is) that session generated or, when
 * it generated none, the newest of any session: its ids copied into *ids, its
 * text into *full when full is not NULL; the count of ids, or 0. The session
 * comes first because replies of different conversations can share a text but
 * not their ids (invalid bytes all print as U+FFFD, and one text has many
 * tokenizations): a conversation gets its own ids whatever other sessions
 * generated since, so its prompt does not depend on their timing. */
static size_t reply_find(kvt_reply_map *m, int match, XXH128_hash_t k, const char *text, const char *reasoning,
                         const char *session, char **full, int32_t **ids) {
    *ids = NULL;
    if (full) *full = NULL;
    const reply_entry *hit = NULL;
    pthread_mutex_lock(&m->mu);
    /* newest first: a reply generated twice maps to its latest ids */
    for (size_t i = 0; i < m->cap; i++) {
        const reply_entry *e = &m->ring[(m->next + m->cap - 1 - i) % m->cap];
        if (!entry_is(e, match, k, text, reasoning)) continue;
        int own = session && *session && e->session && !strcmp(e->session, session);
        if (!hit || own) hit = e;
        if (own || !session || !*session) break;
    }
    size_t n = hit ? hit->n : 0;
    if (hit) {
        *ids = kvt_xmalloc(n * sizeof **ids);
        memcpy(*ids, hit->ids, n * sizeof **ids);
        if (full) *full = kvt_xstrdup(hit->text);
    }
    pthread_mutex_unlock(&m->mu);
    return n;
}

size_t kvt_reply_map_get(kvt_reply_map *m, const void *salt, size_t salt_len, const char *text, int32_t **ids) {
    kvt_reply_owner o = {salt, salt_len, NULL};
    return kvt_reply_map_get_by(m, &o, text, ids);
}

size_t kvt_reply_map_get_split(kvt_reply_map *m, const void *salt, size_t salt_len, const char *reasoning,
                               const char *answer, char **text, int32_t **ids) {
    kvt_reply_owner o = {salt, salt_len, NULL};
    return kvt_reply_map_get_split_by(m, &o, reasoning, answer, text, ids);
}

size_t kvt_reply_map_get_by(kvt_reply_map *m, const kvt_reply_owner *o, const char *text, int32_t **ids) {
    return reply_find(m, 0, reply_key(o->salt, o->salt_len, text), text, NULL, o->session, NULL, ids);
}

size_t kvt_reply_map_get_split_by(kvt_reply_map *m, const kvt_reply_owner *o, const char *reasoning, const char *answer,
                                  char **text, int32_t **ids) {
    XXH128_hash_t k = reasoning ? reply_key_of(o->salt, o->salt_len, 's', reasoning, answer)
                                : reply_key_of(o->salt, o->salt_len, 'a', answer, NULL);
    return reply_find(m, reasoning ? 1 : 2, k, answer, reasoning, o->session, text, ids);
}

/* ---- records --------------------------------------------------------------- */

/* Body layout after the record's head (KVT_REPLY_RECORD_HEAD: u32 body bytes,
 * u32 CRC32C of the body), little-endian: */
#define RB_KEYS 0   /* 3 x 16B: key, split_key, answer_key (each hi then lo, u64) */
#define RB_FLAGS 48 /* u32: bit 0, the reply has its reasoning and answer */
#define RB_LENS 52  /* u32 x 4: bytes of text, reasoning, answer, session */
#define RB_N_IDS 68 /* u32: ids */
#define RB_FIXED 72 /* then the four strings (no NULs) and the ids (i32) */
#define RF_SPLIT 1u
#define RB_MAX (1u << 30) /* no body is longer: a bigger length is damage */

static void wr_key(uint8_t *p, XXH128_hash_t k) {
    kvt_wr64le(p, k.high64);
    kvt_wr64le(p + 8, k.low64);
}
static XXH128_hash_t rd_key(const uint8_t *p) {
    XXH128_hash_t k = {.high64 = kvt_rd64le(p), .low64 = kvt_rd64le(p + 8)};
    return k;
}

static size_t slen(const char *s) { return s ? strlen(s) : 0; }

static size_t entry_record_bytes(const reply_entry *e) {
    return KVT_REPLY_RECORD_HEAD + RB_FIXED + slen(e->text) + slen(e->reasoning) + slen(e->answer) + slen(e->session) +
        4 * e->n;
}

/* Writes e's record (entry_record_bytes of it) to out. The salt is not in
 * it, only the keys hashed with it: the salt holds the tenant's API key. */
static void entry_record(const reply_entry *e, uint8_t *out) {
    uint8_t *b = out + KVT_REPLY_RECORD_HEAD;
    wr_key(b + RB_KEYS, e->key);
    wr_key(b + RB_KEYS + 16, e->split_key);
    wr_key(b + RB_KEYS + 32, e->answer_key);
    kvt_wr32le(b + RB_FLAGS, e->answer ? RF_SPLIT : 0);
    const char *s[4] = {e->text, e->reasoning, e->answer, e->session};
    uint8_t *p = b + RB_FIXED;
    for (int i = 0; i < 4; i++) {
        size_t l = slen(s[i]);
        kvt_wr32le(b + RB_LENS + 4 * i, (uint32_t)l);
        if (l) memcpy(p, s[i], l);
        p += l;
    }
    kvt_wr32le(b + RB_N_IDS, (uint32_t)e->n);
    for (size_t i = 0; i < e->n; i++, p += 4) kvt_wr32le(p, (uint32_t)e->ids[i]);
    uint32_t body = (uint32_t)(p - b);
    kvt_wr32le(out, body);
    kvt_wr32le(out + 4, kvt_crc32c(0, b, body));
}

size_t kvt_reply_map_dump(kvt_reply_map *m, uint8_t **buf, size_t *count) {
    pthread_mutex_lock(&m->mu);
    size_t bytes = 0, k = 0;
    for (size_t i = 0; i < m->cap; i++)
        if (m->ring[i].text) bytes += entry_record_bytes(&m->ring[i]);
    *buf = kvt_xmalloc(bytes ? bytes : 1);
    for (size_t i = 0, at = 0; i < m->cap; i++) { /* oldest first: replayed in order, the newest wins again */
        const reply_entry *e = &m->ring[(m->next + i) % m->cap];
        if (!e->text) continue;
        entry_record(e, *buf + at);
        at += entry_record_bytes(e);
        k++;
    }
    pthread_mutex_unlock(&m->mu);
    *count = k;
    return bytes;
}

/* A copy of the l bytes at p as a string; NULL when l is 0, or when they
 * hold a NUL (a C string cannot), which also sets *bad. */
static char *rec_str(const uint8_t *p, uint32_t l, int *bad) {
    if (memchr(p, 0, l)) *bad = 1;
    return l && !*bad ? kvt_xstrndup((const char *)p, l) : NULL;
}

/* Decodes the body b[0..len) into e. Returns NULL or what is wrong. */
static const char *rec_decode(const uint8_t *b, size_t len, size_t max_ids, int32_t n_vocab, reply_entry *e) {
    if (len < RB_FIXED) return "body shorter than its fixed part";
    uint64_t sum = 0;
    uint32_t l[4], n = kvt_rd32le(b + RB_N_IDS), flags = kvt_rd32le(b + RB_FLAGS);
    for (int i = 0; i < 4; i++) sum += l[i] = kvt_rd32le(b + RB_LENS + 4 * i);
    if (RB_FIXED + sum + 4ull * n != len) return "lengths that do not add up to the body";
    if (!n || n > max_ids || !l[0]) return "no text or a count of ids out of range";
    if (flags & ~RF_SPLIT) return "unknown flags";
    if (!(flags & RF_SPLIT) && (l[1] || l[2])) return "a reasoning or answer without the split flag";
    int bad = 0, split = flags & RF_SPLIT;
    const uint8_t *p = b + RB_FIXED;
    memset(e, 0, sizeof *e);
    e->key = rd_key(b + RB_KEYS);
    e->text = rec_str(p, l[0], &bad);
    if (split) {
        e->reasoning = bad ? NULL : kvt_xstrndup((const char *)p + l[0], l[1]);
        e->answer = bad ? NULL : kvt_xstrndup((const char *)p + l[0] + l[1], l[2]);
        if (memchr(p + l[0], 0, (size_t)l[1] + l[2])) bad = 1;
        e->split_key = rd_key(b + RB_KEYS + 16);
        e->answer_key = rd_key(b + RB_KEYS + 32);
    }
    e->session = bad ? NULL : rec_str(p + l[0] + l[1] + l[2], l[3], &bad);
    p += sum;
    e->n = n;
    e->ids = kvt_xmalloc(n * sizeof *e->ids);
    for (uint32_t i = 0; i < n; i++) {
        e->ids[i] = (int32_t)kvt_rd32le(p + 4 * i);
        if (e->ids[i] < 0 || (n_vocab > 0 && e->ids[i] >= n_vocab)) bad = 2;
    }
    if (!bad) return NULL;
    entry_clear(e);
    return bad == 2 ? "a token id outside the vocabulary" : "a NUL inside a string";
}

int kvt_reply_map_replay(kvt_reply_map *m, const uint8_t *buf, size_t len, int32_t n_vocab, size_t *used,
                         size_t *count) {
    size_t at = 0, k = 0;
    const char *why = NULL;
    while (at < len && !why) {
        if (len - at < KVT_REPLY_RECORD_HEAD) {
            why = "a record cut short";
            break;
        }
        uint32_t body = kvt_rd32le(buf + at);
        const uint8_t *b = buf + at + KVT_REPLY_RECORD_HEAD;
        reply_entry e;
        if (body > RB_MAX || body < RB_FIXED) why = "an impossible length";
        else if (body > len - at - KVT_REPLY_RECORD_HEAD) why = "a record cut short";
        else if (kvt_crc32c(0, b, body) != kvt_rd32le(buf + at + 4)) why = "a bad checksum";
        else if (!(why = rec_decode(b, body, m->max_ids, n_vocab, &e))) {
            entry_insert(m, &e);
            k++;
            at += KVT_REPLY_RECORD_HEAD + body;
        }
    }
    *used = at;
    *count = k;
    return why ? kvt_fail(KVT_EFORMAT, "%s", why) : 0;
}
