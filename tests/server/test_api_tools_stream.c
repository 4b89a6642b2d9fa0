// SPDX-License-Identifier: MIT
/* Tool calls read while a reply is generated: for every prefix of a reply
 * in each family's style, the calls read so far are a prefix of the calls
 * of the whole reply (names whole, arguments a prefix of the final ones),
 * never shrink as the text grows, and at the end equal them; a form the scan
 * does not follow gives no call (it is sent whole at the end); the ids are
 * the ones the finished reply's calls get. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_tools.h"
#include "api_tools_stream.h"
#include "common.h"
#include "testutil.h"

#define MAX_PARTS 8

/* Every prefix of text against the calls of the whole of it (parallel). */
static void check_prefixes(kvt_chat_family f, const char *text, size_t want_calls) {
    kvt_api_call *calls = NULL;
    char *content = NULL;
    size_t nc = kvt_api_parse_calls(f, text, 1, "chatcmpl-abc", &calls, &content);
    CHECKF(nc == want_calls, "family %d: %zu calls in the whole text, want %zu", (int)f, nc, want_calls);
    size_t len = strlen(text), prev = 0;
    for (size_t l = 0; l <= len; l++) {
        kvt_api_call_part p[MAX_PARTS];
        size_t first, n = kvt_api_calls_partial(f, text, l, p, MAX_PARTS, &first);
        CHECKF(n >= prev && n <= nc, "family %d, prefix %zu: %zu calls after %zu", (int)f, l, n, prev);
        prev = n;
        for (size_t k = 0; k < n && k < nc; k++) {
            CHECKF(p[k].name_len == strlen(calls[k].name) && !memcmp(text + p[k].name_at, calls[k].name, p[k].name_len),
                   "family %d, prefix %zu: call %zu's name", (int)f, l, k);
            CHECKF(p[k].args_len <= strlen(calls[k].arguments) &&
                       !memcmp(text + p[k].args_at, calls[k].arguments, p[k].args_len),
                   "family %d, prefix %zu: call %zu's arguments are not a prefix of the final ones", (int)f, l, k);
        }
        if (l == len) {
            CHECKF(n == nc, "family %d: %zu calls read at the end, want %zu", (int)f, n, nc);
            for (size_t k = 0; k < n; k++)
                CHECKF(p[k].args_done && p[k].args_len == strlen(calls[k].arguments), "family %d: call %zu ends whole",
                       (int)f, k);
            if (nc)
                CHECKF(!strncmp(text, content, strlen(content)) && first >= strlen(content),
                       "family %d: the content comes before the first call", (int)f);
        }
    }
    for (size_t k = 0; k < nc; k++) {
        char id[96];
        kvt_api_call_id("chatcmpl-abc", k, id, sizeof id);
        CHECKF(!strcmp(id, calls[k].id), "call %zu's id %s, the reply's %s", k, id, calls[k].id);
    }
    kvt_api_calls_free(calls, nc);
    free(content);
}

int main(void) {
    check_prefixes(KVT_CHAT_CHATML,
                   "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa}ris\\\"{\", "
                   "\"days\": [1, {\"x\": 2}]}}\n</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": "
                   "{\"a\": 2, \"b\": 3}}\n</tool_call>",
                   2);
    check_prefixes(KVT_CHAT_LLAMA3, "{\"name\": \"add\", \"parameters\": {\"a\": 2, \"b\": {\"c\": \"}\"}}}", 1);
    check_prefixes(KVT_CHAT_MISTRAL,
                   "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 2}}, {\"name\": \"sub\", \"arguments\": "
                   "{\"b\": \"]\"}}]",
                   2);
    /* another form: no call read while it is written (it goes whole at the end) */
    kvt_api_call_part p[MAX_PARTS];
    size_t first;
    const char *other = "<tool_call>\n{\"arguments\": {\"a\": 2}, \"name\": \"add\"}\n</tool_call>";
    CHECK(kvt_api_calls_partial(KVT_CHAT_CHATML, other, strlen(other), p, MAX_PARTS, &first) == 0);
    const char *plain = "no calls here";
    CHECK(kvt_api_calls_partial(KVT_CHAT_CHATML, plain, strlen(plain), p, MAX_PARTS, &first) == 0 &&
          first == strlen(plain));
    /* max 1 (parallel_tool_calls false): the first call only */
    const char *two = "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call><tool_call>\n{\"name\": \"b\", "
                      "\"arguments\": {}}\n</tool_call>";
    CHECK(kvt_api_calls_partial(KVT_CHAT_CHATML, two, strlen(two), p, 1, &first) == 1);
    return kvt_test_done("test_api_tools_stream");
}
