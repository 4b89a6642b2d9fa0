// SPDX-License-Identifier: MIT
/* Tool calls read out of a reply while it is generated, so a stream can
 * send each call's name as soon as it is written and its arguments in
 * fragments as they come (OpenAI's and llama-server's streaming of tool
 * calls). The calls of the finished text (kvt_api_parse_calls) stay the
 * answer; what is read here is a prefix of them: the scan follows only the
 * form kvtier renders and its grammars force, {"name": "N", "arguments":
 * {...}} (Llama 3: "parameters") after the family's opening, and stops at
 * anything else, whose calls then go whole when the reply is done.
 *
 * Thread-safety: every function is reentrant. */
#ifndef KVT_API_TOOLS_STREAM_H
#define KVT_API_TOOLS_STREAM_H

#include <stddef.h>

#include "api_response.h"
#include "chat.h"

/* One call as far as a prefix of the reply shows it: offsets into the text. */
typedef struct {
    size_t name_at, name_len; /* the function name */
    size_t args_at, args_len; /* the arguments object's text so far, from its '{' */
    int args_done;            /* that object is closed: args_len is its whole text */
} kvt_api_call_part;

/* The calls text[0..len) shows so far in family f's style, at most max, into parts; *first gets
 * where the first call's opening begins (the content before it is the reply's text). Returns their
 * number: a call counts once its name is whole and its arguments object has begun. */
size_t kvt_api_calls_partial(kvt_chat_family f, const char *text, size_t len, kvt_api_call_part *parts, size_t max,
                             size_t *first);

/* The id kvt_api_parse_calls gives call i of a response: "call_<the id after its last '-'>_<i>". */
void kvt_api_call_id(const char *response_id, size_t i, char *out, size_t cap);

/* A chat stream chunk with one tool call delta at index: its id, type and name (id non-NULL: the
 * call's first chunk, with arguments "") or a fragment of its arguments (id NULL). */
char *kvt_api_call_delta_json(const kvt_api_head *h, size_t index, const char *id, const char *name, const char *args);

#endif
