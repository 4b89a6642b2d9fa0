// SPDX-License-Identifier: MIT
/* Chat templates: recognises the family of a model's tokenizer.chat_template
 * (ChatML, Llama 3, Llama 2, Mistral, Qwen3, Gemma, Phi-3) and renders conversations for it to
 * token ids. Also the reply map: assistant replies kvtier generated, keyed by
 * their text, so the next turn reuses the exact token ids instead of a
 * re-tokenization that would diverge from the cached sequence. */
#ifndef KVT_CHAT_H
#define KVT_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

typedef enum {
    KVT_CHAT_UNKNOWN = 0,
    KVT_CHAT_CHATML,
    KVT_CHAT_LLAMA3,
    KVT_CHAT_LLAMA2,
    KVT_CHAT_MISTRAL,
    KVT_CHAT_QWEN3, /* ChatML with Qwen3's <think> handling of assistant turns */
    KVT_CHAT_GEMMA, /* <start_of_turn>user/model, system folded into the first turn (Gemma 2 and 3) */
    KVT_CHAT_PHI3,  /* <|user|> ... <|end|> (Phi-3, Phi-3.5, Phi-4-mini) */
} kvt_chat_family;

/* Family of a Jinja template by its markers; KVT_CHAT_UNKNOWN for NULL or unrecognised. */
kvt_chat_family kvt_chat_detect(const char *tmpl);
/* "chatml", "llama3", "llama2", "mistral", "qwen3", "gemma", "phi3" or "unknown". */
const char *kvt_chat_family_name(kvt_chat_family f);
/* The family named name (as kvt_chat_family_name spells it), or KVT_CHAT_UNKNOWN. */
kvt_chat_family kvt_chat_family_parse(const char *name);

/* One message of a conversation; both strings are NUL-terminated and borrowed. */
typedef struct {
    const char *role; /* "system", "user", "assistant" (others render like "user" where the family has no slot) */
    const char *content;
} kvt_chat_msg;

/* Looks up the token ids kvtier generated for an assistant reply's text.
 * Returns the number of ids copied into a malloc'd *ids (caller frees), or 0
 * when the text is unknown. */
typedef size_t (*kvt_chat_reply_fn)(void *ctx, const char *text, int32_t **ids);

/* Renders msgs[0..n) in family f, followed by the assistant generation prompt,
 * to token ids in a malloc'd *out (caller frees). Template markup is tokenized
 * with special tokens recognised; message content is tokenized as plain text
 * (a user cannot inject "<|im_start|>"); an assistant message whose text
 * lookup (may be NULL) knows is spliced in as the exact ids it names. f must
 * not be KVT_CHAT_UNKNOWN. A conversation of more than max_tokens ids fails
 * with KVT_ELIMIT, and rendering stops as soon as that is known (SIZE_MAX: no
 * limit). Returns 0, or a negative code with kvt_errmsg(). */
int kvt_chat_render(const kvt_tokenizer *t, kvt_chat_family f, const kvt_chat_msg *msgs, size_t n,
                    kvt_chat_reply_fn lookup, void *lookup_ctx, size_t max_tokens, int32_t **out, size_t *n_out);

/* kvt_chat_render, also reporting in *at the token offset where the content
 * of msgs[msg] begins (after its role markup; for Llama 2 / Mistral, a system
 * message folds into the next user turn, so its offset is that turn's). *at is
 * the end of the conversation when msg is out of range. */
int kvt_chat_render_at(const kvt_tokenizer *t, kvt_chat_family f, const kvt_chat_msg *msgs, size_t n,
                       kvt_chat_reply_fn lookup, void *lookup_ctx, size_t max_tokens, size_t msg, size_t *at,
                       int32_t **out, size_t *n_out);

/* A conversation's known beginning (kvt_chat_render_from): ids[0..n) are the
 * ids of its rendering up to the end of the reply of msgs[reply], an
 * assistant message, whose text is reply_text (NUL-terminated). Borrowed. */
typedef struct {
    const int32_t *ids;
    size_t n;
    size_t reply;
    const char *reply_text;
} kvt_chat_prefix;

/* kvt_chat_render_at that neither renders nor tokenizes what pre covers: its
 * ids stand for the rendering up to the end of pre's reply (lookup is not
 * called for that reply or any before it), and the rest is rendered after
 * them as kvt_chat_render_at renders it. Every piece is tokenized on its own
 * after the id before it, so the result is kvt_chat_render_at's wherever
 * pre's ids are its rendering up to that reply with the reply spliced.
 * KVT_ENOTFOUND when the family renders that message otherwise than
 * reply_text (Qwen3 keeps only the answer of a turn before the last user
 * message) or msgs has no such reply: render the conversation whole. *at as
 * kvt_chat_render_at's when msg comes after pre's reply, else the end. */
int kvt_chat_render_from(const kvt_tokenizer *t, kvt_chat_family f, const kvt_chat_msg *msgs, size_t n,
                         kvt_chat_reply_fn lookup, void *lookup_ctx, size_t max_tokens, size_t msg, size_t *at,
                         const kvt_chat_prefix *pre, int32_t **out, size_t *n_out);

/* A bounded map (salt, reply text) -> token ids, oldest entries dropped first.
 * Thread-safe: every function may be called from any thread. */
typedef struct kvt_reply_map kvt_reply_map;

/* A map holding at most max_entries replies of at most max_ids ids each. */
kvt_reply_map *kvt_reply_map_new(size_t max_entries, size_t max_ids);
void kvt_reply_map_free(kvt_reply_map *m);
/* Remembers text -> ids[0..n) under salt (copies everything). Replies longer
 * than max_ids or empty are ignored. */
void kvt_reply_map_put(kvt_reply_map *m, const void *salt, size_t salt_len, const char *text, const int32_t *ids,
                       size_t n);
/* Copies the ids remembered for (salt, text) into a malloc'd *ids (caller
 * frees) and returns their count, or 0 (and *ids = NULL) if unknown. */
size_t kvt_reply_map_get(kvt_reply_map *m, const void *salt, size_t salt_len, const char *text, int32_t **ids);
/* kvt_reply_map_put for a reply whose text a client got split into its
 * reasoning and its answer (reasoning_content and content): it is found by
 * its text and, with kvt_reply_map_get_split, by those two parts. */
void kvt_reply_map_put_split(kvt_reply_map *m, const void *salt, size_t salt_len, const char *text,
                             const char *reasoning, const char *answer, const int32_t *ids, size_t n);
/* The newest reply put with exactly this reasoning and answer (reasoning NULL:
 * any reasoning and exactly this answer): its ids into a malloc'd *ids and
 * its full generated text into a malloc'd *text (caller frees both); returns
 * the count of ids, or 0 (and both NULL) if unknown. */
size_t kvt_reply_map_get_split(kvt_reply_map *m, const void *salt, size_t salt_len, const char *reasoning,
                               const char *answer, char **text, int32_t **ids);

/* Whose a reply is: the tenant's salt, and the session (kvtier.session_id or
 * X-Session-Id) that generated it or asks for it; NULL or "" for none. */
typedef struct {
    const void *salt;
    size_t salt_len;
    const char *session;
} kvt_reply_owner;

/* The functions above with a session: a reply is put with the session that
 * generated it, and a lookup takes the newest reply of its own session before
 * the newest of any (replies of different conversations can share a text
 * but not their ids, and a conversation's prompt must not depend on what
 * other sessions generated meanwhile). */
void kvt_reply_map_put_by(kvt_reply_map *m, const kvt_reply_owner *o, const char *text, const char *reasoning,
                          const char *answer, const int32_t *ids, size_t n);
size_t kvt_reply_map_get_by(kvt_reply_map *m, const kvt_reply_owner *o, const char *text, int32_t **ids);
size_t kvt_reply_map_get_split_by(kvt_reply_map *m, const kvt_reply_owner *o, const char *reasoning, const char *answer,
                                  char **text, int32_t **ids);

/* ---- the reply map as records, for a journal that outlives the process ---- */

/* One put as bytes: u32 body bytes, u32 CRC32C of the body, then the body
 * (little-endian): the entry's three keys, its split flag, the lengths of its
 * text, reasoning, answer and session, its count of ids, then those strings
 * and ids. The keys are hashes of the salt with the texts; the salt itself
 * (which holds the tenant's API key) is never written, and a lookup still
 * needs it, so no tenant gets another's ids from a replayed record. */
#define KVT_REPLY_RECORD_HEAD 8

/* kvt_reply_map_put_by that also encodes what it put: the record in a
 * malloc'd *rec (rec NULL: not wanted) and its bytes returned; 0 and NULL
 * when nothing was put (an empty reply, or one longer than max_ids). */
size_t kvt_reply_map_put_rec(kvt_reply_map *m, const kvt_reply_owner *o, const char *text, const char *reasoning,
                             const char *answer, const int32_t *ids, size_t n, uint8_t **rec);
/* Every entry, oldest first, as consecutive records in a malloc'd *buf
 * (caller frees); returns its bytes, *count the entries. */
size_t kvt_reply_map_dump(kvt_reply_map *m, uint8_t **buf, size_t *count);
/* Puts the records of buf[0..len) in order, as kvt_reply_map_put_by would
 * (the newest wins; past the capacity the oldest are dropped). Stops at the
 * first record cut short, of an impossible length, with a bad CRC, or whose
 * contents are invalid (a NUL in a string, no text, more than max_ids ids,
 * an id outside [0, n_vocab) where n_vocab > 0). Returns 0 when all of buf
 * was put, else KVT_EFORMAT with kvt_errmsg() saying what is wrong; *used
 * gets the bytes of the good records before it, *count how many. */
int kvt_reply_map_replay(kvt_reply_map *m, const uint8_t *buf, size_t len, int32_t n_vocab, size_t *used, size_t *count);

/* A span of rendered chat text that becomes given ids instead of its
 * tokenization: a reply kvtier generated, at the byte offset where the
 * rendering has exactly its text. */
typedef struct {
    size_t at, len;     /* text[at..at+len) */
    const int32_t *ids; /* borrowed */
    size_t n;
    size_t tok_at; /* set by kvt_chat_tokenize_spliced: where the ids begin in its result */
} kvt_chat_splice;

/* Tokenizes text[0..len) with control tokens recognised (a template's
 * rendering), except spans[0..n_spans) (in order, not overlapping, within
 * text), which become their ids; each span's tok_at gets where its ids begin
 * (a span of no text and no ids marks a place: its byte offset's token
 * offset). The pieces between spans are tokenized one by one (add's BOS
 * before the first, its EOS after the last), so a rendering that extends
 * another at a span boundary tokenizes to an extension of its ids.
 * Past max_tokens ids: KVT_ELIMIT. 0 and a malloc'd *out of *n_out ids, or a
 * negative code with kvt_errmsg(). */
int kvt_chat_tokenize_spliced(const kvt_tokenizer *t, const char *text, size_t len, int add, kvt_chat_splice *spans,
                              size_t n_spans, size_t max_tokens, int32_t **out, size_t *n_out);
/* kvt_chat_tokenize_spliced where the bytes marked in plain (NULL: none;
 * else len of them, parallel to text) are plain text: the messages' own text
 * in a template's rendering, where no control token may be read. */
int kvt_chat_tokenize_marked(const kvt_tokenizer *t, const char *text, const unsigned char *plain, size_t len, int add,
                             kvt_chat_splice *spans, size_t n_spans, size_t max_tokens, int32_t **out, size_t *n_out);
/* kvt_chat_tokenize_marked of the text that follows ids prefix[0..n_prefix) (a
 * rendering's beginning, tokenized or spliced before, BOS included): the
 * result is prefix's ids, then text's pieces tokenized as they would be after
 * a span that ended with prefix's last id (no BOS; tok_at counts prefix). */
int kvt_chat_tokenize_after(const kvt_tokenizer *t, const int32_t *prefix, size_t n_prefix, const char *text,
                            const unsigned char *plain, size_t len, int add, kvt_chat_splice *spans, size_t n_spans,
                            size_t max_tokens, int32_t **out, size_t *n_out);

#endif
