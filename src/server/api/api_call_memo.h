// SPDX-License-Identifier: MIT
/* The tool calls kvtier generated, by call id and tenant salt: a bounded map
 * (oldest dropped first), which lets a conversation's history hold the text
 * kvtier generated where a client sends its calls back.
 *
 * Clients send a call back re-serialized (LangChain and the AI SDK as
 * JSON.stringify of the parsed arguments, Python's json.dumps elsewhere), so
 * the history would no longer hold the bytes kvtier generated and their
 * cached KV would be lost; when the returned arguments are the same JSON as
 * the remembered ones, the call is rendered with the remembered text
 * (kvt_call_memo_args). And a model may write its calls otherwise than the
 * family's style (other whitespace around them, between them and the text
 * before them, or inside the call's JSON), so a turn rendered from its calls
 * would not be the text it generated: when a client sends back all the calls
 * of a reply unchanged (the same ids in the same order, the same names,
 * arguments that are the same JSON) with the same content, the turn is the
 * reply's generated text (kvt_call_memo_reply), which the reply map splices
 * as its exact ids.
 *
 * Thread-safe: every function may be called from any thread. */
#ifndef KVT_API_CALL_MEMO_H
#define KVT_API_CALL_MEMO_H

#include <stddef.h>

#include "api_response.h"
#include "chat.h"

struct cJSON;

typedef struct kvt_call_memo kvt_call_memo;

/* A memo of at most max_entries calls. replies (may be NULL, else it must
 * outlive the memo): a reply's text stands for its turn only while replies
 * still holds it, so a turn is never written as a text whose ids are gone. */
kvt_call_memo *kvt_call_memo_new(size_t max_entries, kvt_reply_map *replies);
void kvt_call_memo_free(kvt_call_memo *m);

/* Remembers calls[0..n) (id, name and arguments, copied) under salt, read
 * from a reply of family f whose whole generated text is text (NULL: the
 * calls alone) and whose answer had content (the text before the calls),
 * which the answer gave split into reasoning and answer (reasoning_content
 * and content; both NULL where it was not split).
 * The reply is remembered to stand for its turn only when it holds nothing
 * the answer left out but whitespace: content and the calls, as f writes them
 * with these arguments texts (kvt_api_calls_render), are text but for
 * whitespace; a call parallel_tool_calls false dropped, or text after the
 * calls, is more. */
void kvt_call_memo_put(kvt_call_memo *m, kvt_chat_family f, const void *salt, size_t salt_len, const kvt_api_call *calls,
                       size_t n, const char *content, const char *reasoning, const char *answer, const char *text);

/* The arguments text remembered for call id under salt, where it is the same
 * JSON value (key order aside) as sent: malloc'd, else NULL (also for m or id
 * NULL). */
char *kvt_call_memo_args(kvt_call_memo *m, const void *salt, size_t salt_len, const char *id, const char *sent);

/* The generated text of the reply remembered under salt whose calls are
 * calls (an assistant message's tool_calls as the client sent them: the same
 * ids in the same order, names, and arguments that are the same JSON) and
 * whose content is content (null sent: ""), or, where reasoning is sent (not
 * NULL or ""), whose content was split into that reasoning and content,
 * where the memo's reply map (if any) still holds that text: malloc'd, else
 * NULL (also for m NULL). */
char *kvt_call_memo_reply(kvt_call_memo *m, const void *salt, size_t salt_len, const char *content,
                          const char *reasoning, const struct cJSON *calls);

#endif
