// SPDX-License-Identifier: MIT
/* Tool calling and structured output on the OpenAI surface: parsing tools,
 * tool_choice, parallel_tool_calls, response_format and the tool turns of a
 * conversation; rendering tools, tool calls and tool results into the chat
 * messages a template family expects; the grammar that forces a tool call
 * or a JSON document; and reading tool calls back out of generated text.
 *
 * The rendering is byte-stable: the same tools in the same order give the
 * same text (function definitions as JSON with ", " and ": " separators, in
 * the order the client sent their keys), placed before the conversation (the
 * system turn for ChatML and the generic style, the first user turn for
 * Llama 3), so an agent's tool block is a cached prefix. A turn of tool
 * calls kvtier generated renders back as exactly the text it generated
 * (api_call_memo.h), so the reply map splices its exact token ids on the
 * next turn.
 *
 * Styles by family:
 *  - Mistral: the tools as a JSON array in a "tools" message, which chat.c
 *    writes as [AVAILABLE_TOOLS][...][/AVAILABLE_TOOLS] before the FIRST user
 *    turn (Mistral's template puts it before the last one, which moves every
 *    turn and would break the cached prefix); calls as
 *    [TOOL_CALLS][{"name": N, "arguments": {...}}, ...] (without Mistral's
 *    9-character call ids, so a call renders as the text generated); results
 *    in a "tool" message {"content": ..., "call_id": "..."} written as
 *    [TOOL_RESULTS]...[/TOOL_RESULTS].
 *  - ChatML (Qwen 2.5, Hermes) and the generic style (Llama 2,
 *    unknown): tools inside <tools></tools> in the system turn, calls as
 *    <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>, results in a
 *    user turn as <tool_response>\n...\n</tool_response>.
 *  - Llama 3.x: the function definitions at the top of the first user turn,
 *    calls as {"name": N, "parameters": {...}}, results in an "ipython" turn.
 *
 * Thread-safety: every function is reentrant. */
#ifndef KVT_API_TOOLS_H
#define KVT_API_TOOLS_H

#include <stddef.h>

#include "api_call_memo.h"
#include "api_openai.h"
#include "api_response.h"
#include "chat.h"
#include "json_grammar.h"
#include "json_lazy.h"

struct cJSON;

/* tools, tool_choice, parallel_tool_calls, response_format and llama.cpp's
 * json_schema of a request body root into r. Returns 0, or -1 with *err
 * filled (400 naming the field). */
int kvt_api_parse_tools(const struct cJSON *root, kvt_api_request *r, kvt_api_error *err);
/* A message's tool_calls (assistant) or tool_call_id (tool) into *out.
 * Returns 0, or -1 with *err filled (nothing left allocated in *out). */
int kvt_api_parse_msg_tools(const struct cJSON *msg, size_t index, const char *role, kvt_api_msg_tools *out,
                            kvt_api_error *err);
/* Frees what the two parsers above stored in r. */
void kvt_api_tools_free(kvt_api_request *r);

/* The text kvtier writes a turn of calls[0..n) in family f's style with,
 * content (the text before them) first, each call with its arguments text as
 * given: a call kvtier generates is written so. malloc'd. */
char *kvt_api_calls_render(kvt_chat_family f, const char *content, const kvt_api_call *calls, size_t n);

/* The messages of a, with tools, tool calls and tool results rendered in
 * family f's style, as plain role/content messages for kvt_chat_render.
 * memo (may be NULL) restores the text kvtier generated for salt: a
 * reply's calls sent back unchanged as the reply's text, else each call's
 * arguments text (kvt_call_memo_reply, kvt_call_memo_args). Under Qwen3
 * an assistant turn's reasoning_content is written as its template does
 * (<think>, the reasoning, </think>, then the text and calls), so a reply
 * with reasoning and calls sent back split as it was answered is its
 * generated text. Returns a malloc'd array of *n messages whose strings are owned by *arena
 * or borrowed from a (free both with kvt_api_messages_free; a must outlive
 * the array). *last_user gets the index of the last message that was a user
 * message in a (SIZE_MAX: none), where kvtier.documents go. */
kvt_chat_msg *kvt_api_messages(const kvt_api_request *a, kvt_chat_family f, kvt_call_memo *memo, const void *salt,
                               size_t salt_len, size_t *n, size_t *last_user, char ***arena);
void kvt_api_messages_free(kvt_chat_msg *m, char **arena);

/* The content a template gets for assistant message i of a, which has tool
 * calls: the generated text of the reply memo remembers for salt when the
 * client sent it back unchanged (kvt_call_memo_reply); where the message
 * also sent reasoning_content back, the reply's text after its reasoning
 * (the template writes reasoning_content before it itself); else its
 * content, then each call in family f's style, as kvtier writes one it
 * generates (the arguments text memo remembers for salt when the client
 * sent the same JSON back). The text of the reply this server generated for
 * that turn, where it did; malloc'd. */
char *kvt_api_calls_turn(const kvt_api_request *a, size_t i, kvt_chat_family f, kvt_call_memo *memo, const void *salt,
                         size_t salt_len);

/* 1 when a's output is to be read for tool calls: tools given and
 * tool_choice other than none. */
int kvt_api_tools_active(const kvt_api_request *a);

/* The grammar a's output must follow: a forced tool call (tool_choice
 * required or a named function: one call of one of the allowed functions,
 * its arguments matching the function's parameters), or a JSON document
 * (response_format json_object / json_schema); *out NULL when the output is
 * free. Returns 0, or -1 with *err filled (400 naming the schema keyword
 * kvtier does not support, or a combination it refuses). Free *out with
 * kvt_jg_schema_free. */
int kvt_api_grammar(const kvt_api_request *a, kvt_chat_family f, kvt_jg_schema **out, kvt_api_error *err);

/* The lazy grammar that holds the calls a model writes of its own accord
 * (tool_choice auto, tools given) to the family's form: the free text ends
 * at the family's call opening (ChatML "<tool_call>", Mistral
 * "[TOOL_CALLS]", Llama 3 a reply that opens with "{"); from there each call
 * names one of the tools and its arguments follow the tool's parameters
 * (any JSON object where a tool has none, or where kvtier cannot compile
 * them and the tool is not strict); after a call, another (unless
 * parallel_tool_calls is false; Llama 3 writes one call a reply) or the end.
 * *out NULL where none applies. Returns 0, or -1 with *err filled (400
 * naming tools: a "strict": true tool whose parameters kvtier cannot
 * follow). Free *out with kvt_jg_lazy_spec_free. */
int kvt_api_lazy_grammar(const kvt_api_request *a, kvt_chat_family f, kvt_jg_lazy_spec **out, kvt_api_error *err);

/* Reads the tool calls out of generated text in family f's style. Returns
 * their number (0: none; then the text is the content), with *calls
 * malloc'd (free with kvt_api_calls_free) and *content the text outside the
 * calls (malloc'd, maybe empty). parallel 0 keeps only the first call. Ids
 * are "call_<response id>_<index>". */
size_t kvt_api_parse_calls(kvt_chat_family f, const char *text, int parallel, const char *response_id,
                           kvt_api_call **calls, char **content);

/* Reads the calls out of text that the token budget cut: the calls before
 * the cut one, complete, and the cut call with its name and the arguments
 * text written so far (up to the end of its arguments object where that
 * closed; maybe not valid JSON), as OpenAI returns a call that max_tokens
 * cut. Mistral's single [TOOL_CALLS] array is read the same way: its whole
 * objects are the complete calls, the one the cut left open the cut call.
 * Returns 0 when the cut came before the first call's name was whole (then
 * *content is the text before the call's opening, or NULL where there is
 * none or the calls cannot be read: the text is the content). With parallel
 * 0 only the first call is kept; where it is complete, the cut lies in what
 * parallel 0 drops, and *complete is 1: the call is the whole answer (else
 * 0). The rest as kvt_api_parse_calls. */
size_t kvt_api_parse_cut_calls(kvt_chat_family f, const char *text, int parallel, const char *response_id,
                               kvt_api_call **calls, char **content, int *complete);
void kvt_api_calls_free(kvt_api_call *c, size_t n);

#endif
