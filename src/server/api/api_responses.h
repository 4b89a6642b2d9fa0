// SPDX-License-Identifier: MIT
/* The Responses API (POST /v1/responses) as data: its request body checked
 * and turned into the chat completions body that runs it (so messages,
 * tools, tool_choice and json_schema output go through the same parser,
 * templates and grammars as /v1/chat/completions), and the response object,
 * its output items and its stream events built from a finished or running
 * generation. No I/O here; the stored responses are api_responses_store.h's.
 *
 * A conversation is a list of items: messages (role and text content parts),
 * function_call items (a call the model made: call_id, name, arguments) and
 * function_call_output items (the client's result of one). A request's input
 * items, after the stored items of previous_response_id, become chat
 * messages in order; instructions become the system message before them.
 *
 * Thread-safety: every function may be called from any thread; the only
 * state is kvt_api_resp_parse's thread-local copy of an unknown field's name. */
#ifndef KVT_API_RESPONSES_H
#define KVT_API_RESPONSES_H

#include <stddef.h>
#include <stdint.h>

#include "api_error.h"
#include "api_response.h"

struct cJSON;

#define KVT_API_RESP_ID_MAX 96 /* bytes of a response id, with its NUL */

/* A checked Responses request. Owned pointers (kvt_api_resp_request_free). */
typedef struct {
    struct cJSON *root;  /* the body */
    struct cJSON *input; /* the input as an array of items: a string input is one user message item */
    char *previous_id;   /* previous_response_id, or NULL */
    int store;           /* keep the response for GET and previous_response_id (default 1) */
    int stream;
} kvt_api_resp_request;

/* Parses body[0..len) (already through kvt_api_check_body) as a Responses
 * request. Every top-level field is one kvtier reads, one that never changes
 * the output, or one accepted at its neutral value only: anything else is a
 * 400 naming it (its param the field, for an unknown one a thread-local copy
 * of its name valid until this thread's next parse), so no field that would
 * change the output is ignored. The items are checked here too (types, roles,
 * content parts), each fault a 400 naming input[i]. Returns 0, or KVT_EARG
 * with *err filled and nothing left in *out. */
int kvt_api_resp_parse(const char *body, size_t len, kvt_api_resp_request *out, kvt_api_error *err);
void kvt_api_resp_request_free(kvt_api_resp_request *r);

/* Whether key[0..len) is a top-level field a Responses body may hold (for
 * serve --strict's check of every body). Its static name, or NULL. */
const char *kvt_api_resp_field(const char *key, size_t len);

/* The /v1/chat/completions body that runs r, after history (the stored
 * conversation items of previous_response_id, or NULL): instructions as the
 * system message, the items as messages (function calls as an assistant
 * message's tool_calls, their outputs as tool messages), tools in chat's
 * nested shape, text.format as response_format, max_output_tokens as
 * max_completion_tokens, and kvtier's own fields as they are. A malloc'd
 * string, or NULL with *err filled (an item that cannot be a message). */
char *kvt_api_resp_chat_body(const kvt_api_resp_request *r, const struct cJSON *history, kvt_api_error *err);

/* One finished (or, for stream events, running) response. Strings borrowed. */
typedef struct {
    const char *id; /* "resp_..." */
    int64_t created;
    const char *model;
    const char *status;     /* "in_progress", "completed", "incomplete" or "failed" (error: the caller's) */
    const char *incomplete; /* incomplete: why ("max_output_tokens", "server_shutting_down"), else NULL */
    const char *text;       /* the output text outside tool calls ("" none) */
    const kvt_api_call *calls;
    size_t n_calls;
    const kvt_api_usage *u;          /* NULL while in progress */
    const kvt_api_resp_request *req; /* echoes instructions, tools, temperature, ... */
} kvt_api_resp_result;

/* The item ids of a response's output: its message "msg_<tail>" and call i "fc_<tail>_<i>", where
 * tail is the response id after "resp_". */
void kvt_api_resp_item_id(const char *response_id, int call, size_t i, char *out, size_t cap);
/* The response id of an output item id made by kvt_api_resp_item_id into out[0..cap): 1, or 0 when
 * item_id is not one of them (an item_reference names an item by it). */
int kvt_api_resp_item_owner(const char *item_id, char *out, size_t cap);
/* The output items of res: a message with the text (when there is text or no call), then one
 * function_call item per call (call_id the call's id). A new cJSON array the caller owns. */
struct cJSON *kvt_api_resp_output(const kvt_api_resp_result *res);
/* The response object (object "response"), with output as its items (borrowed; NULL: []), usage
 * (input_tokens, input_tokens_details.cached_tokens, output_tokens) and kvtier's cache report.
 * A new cJSON object. */
struct cJSON *kvt_api_resp_obj(const kvt_api_resp_result *res, const struct cJSON *output);

/* One stream event: "event: TYPE\ndata: {type: TYPE, sequence_number: seq, ...fields}\n\n", with
 * fields (taken: added to the event's object, then freed). A malloc'd string. */
char *kvt_api_resp_event(const char *type, int64_t seq, struct cJSON *fields);

#endif
