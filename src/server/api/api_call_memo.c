// SPDX-License-Identifier: MIT
/* The tool calls kvtier generated and the replies they came from, by call id
 * and tenant (see api_call_memo.h). */
#include "api_call_memo.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "api_tools.h"
#include "common.h"

/* One generated call. The first call of a reply that may stand for its turn also holds the reply:
 * how many calls it has (n_calls, else 0), the text before them as the answer gave it (content),
 * that text's reasoning and answer where the answer split them (else NULL) and the whole generated
 * text. The reply's other calls follow it in the ring. */
typedef struct {
    uint64_t salt; /* XXH64 of the tenant salt */
    char *id, *name, *args;
    size_t n_calls;
    char *content, *reasoning, *answer, *text;
} memo_entry;

struct kvt_call_memo {
    pthread_mutex_t mu;
    memo_entry *ring; /* FIFO: the oldest entry is overwritten first */
    size_t cap, next;
    kvt_reply_map *replies; /* where a reply's text must still be known to stand for its turn (may be NULL) */
};

kvt_call_memo *kvt_call_memo_new(size_t max_entries, kvt_reply_map *replies) {
    kvt_call_memo *m = kvt_xcalloc(1, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    m->cap = KVT_MAX(max_entries, 1);
    m->ring = kvt_xcalloc(m->cap, sizeof *m->ring);
    m->replies = replies;
    return m;
}

static void entry_clear(memo_entry *e) {
    free(e->id);
    free(e->name);
    free(e->args);
    free(e->content);
    free(e->reasoning);
    free(e->answer);
    free(e->text);
    memset(e, 0, sizeof *e);
}

void kvt_call_memo_free(kvt_call_memo *m) {
    if (!m) return;
    for (size_t i = 0; i < m->cap; i++) entry_clear(&m->ring[i]);
    free(m->ring);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

/* Whether a and b are the same text but for whitespace (" \t\r\n") anywhere. */
static int same_but_space(const char *a, const char *b) {
    for (;;) {
        while (*a && strchr(" \t\r\n", *a)) a++;
        while (*b && strchr(" \t\r\n", *b)) b++;
        if (*a != *b) return 0;
        if (!*a) return 1;
        a++, b++;
    }
}

void kvt_call_memo_put(kvt_call_memo *m, kvt_chat_family f, const void *salt, size_t salt_len, const kvt_api_call *calls,
                       size_t n, const char *content, const char *reasoning, const char *answer, const char *text) {
    /* the reply stands for its turn only where the answer left out nothing but whitespace: its
     * content, then its calls as the family writes them with the text the model wrote */
    int whole = 0;
    if (n && content && text) {
        char *t = kvt_api_calls_render(f, content, calls, n);
        whole = same_but_space(t, text);
        free(t);
    }
    uint64_t h = XXH64(salt, salt_len, 0);
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < n; i++) {
        memo_entry *e = &m->ring[m->next];
        m->next = (m->next + 1) % m->cap;
        entry_clear(e);
        *e = (memo_entry){.salt = h,
                          .id = kvt_xstrdup(calls[i].id),
                          .name = kvt_xstrdup(calls[i].name),
                          .args = kvt_xstrdup(calls[i].arguments)};
        if (i == 0 && whole) {
            e->n_calls = n;
            e->content = kvt_xstrdup(content);
            e->text = kvt_xstrdup(text);
            if (reasoning && answer) e->reasoning = kvt_xstrdup(reasoning), e->answer = kvt_xstrdup(answer);
        }
    }
    pthread_mutex_unlock(&m->mu);
}

/* The newest entry of call id under salt hash h (m->mu held), or NULL. */
static memo_entry *find(kvt_call_memo *m, uint64_t h, const char *id) {
    for (size_t i = 0; i < m->cap; i++) {
        memo_entry *e = &m->ring[(m->next + m->cap - 1 - i) % m->cap];
        if (e->id && e->salt == h && !strcmp(e->id, id)) return e;
    }
    return NULL;
}

/* 1 if the texts are the same JSON value (key order aside). */
static int same_json(const char *a, const char *b) {
    cJSON *x = cJSON_Parse(a), *y = cJSON_Parse(b);
    int same = x && y && cJSON_Compare(x, y, 1);
    cJSON_Delete(x);
    cJSON_Delete(y);
    return same;
}

char *kvt_call_memo_args(kvt_call_memo *m, const void *salt, size_t salt_len, const char *id, const char *sent) {
    if (!m || !id) return NULL;
    pthread_mutex_lock(&m->mu);
    memo_entry *e = find(m, XXH64(salt, salt_len, 0), id);
    char *out = e ? kvt_xstrdup(e->args) : NULL;
    pthread_mutex_unlock(&m->mu);
    if (out && !same_json(out, sent)) {
        free(out);
        out = NULL;
    }
    return out;
}

/* A call's id and name as a client sent it back, and its arguments (none: "{}"). */
static const char *sent_id(const cJSON *c) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
    return cJSON_IsString(id) ? id->valuestring : NULL;
}

static const char *sent_name(const cJSON *c) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "function"), "name");
    return cJSON_IsString(name) ? name->valuestring : "";
}

static const char *sent_args(const cJSON *c) {
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "function"), "arguments");
    return cJSON_IsString(args) && *args->valuestring ? args->valuestring : "{}";
}

/* Whether entry e's reply had the content the client sent back: as the answer gave it whole, or,
 * where the client sent reasoning back (not NULL or ""), split into that reasoning and content. */
static int same_content(const memo_entry *e, const char *content, const char *reasoning) {
    if (!reasoning || !*reasoning) return !strcmp(e->content, content);
    return e->reasoning && !strcmp(e->reasoning, reasoning) && !strcmp(e->answer, content);
}

char *kvt_call_memo_reply(kvt_call_memo *m, const void *salt, size_t salt_len, const char *content,
                          const char *reasoning, const cJSON *calls) {
    const char *first = m && calls ? sent_id(calls->child) : NULL;
    if (!first) return NULL;
    size_t n = (size_t)cJSON_GetArraySize(calls), k = 0;
    uint64_t h = XXH64(salt, salt_len, 0);
    char *text = NULL;
    pthread_mutex_lock(&m->mu);
    const memo_entry *e = find(m, h, first);
    int ok = e && e->n_calls == n && n <= m->cap && same_content(e, content, reasoning);
    size_t at = e ? (size_t)(e - m->ring) : 0;
    /* the reply's calls follow its first in the ring, unless newer calls overwrote them */
    for (const cJSON *c = calls->child; ok && c; c = c->next, k++) {
        const memo_entry *x = &m->ring[(at + k) % m->cap];
        const char *id = sent_id(c);
        ok = x->id && x->salt == h && id && !strcmp(x->id, id) && !strcmp(x->name, sent_name(c)) &&
            same_json(x->args, sent_args(c));
    }
    if (ok) text = kvt_xstrdup(e->text);
    pthread_mutex_unlock(&m->mu);
    int32_t *ids = NULL;
    if (text && m->replies && !kvt_reply_map_get(m->replies, salt, salt_len, text, &ids)) {
        free(text);
        text = NULL;
    }
    free(ids);
    return text;
}
