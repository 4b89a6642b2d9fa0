// SPDX-License-Identifier: MIT
/* Fuzz driver: a chat template is untrusted input (it comes in the GGUF or a
 * --chat-template-file). Any bytes must parse or be refused with a message,
 * and a template that parses must render a fixed conversation (system, user,
 * an assistant tool call, a tool result, tools) or fail with a message,
 * within small limits: no crash, no hang, no unbounded memory. Built for
 * libFuzzer with clang (-DKVT_FUZZ=ON) and, in every build, as a replay test
 * over fuzz/corpus/jinja plus deterministic mutations. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char VARS[] =
    "{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"add_generation_prompt\": true, \"enable_thinking\": false,"
    "\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"h\\u00e9 "
    "<think>x</think>\"}, {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"c1\", \"type\": "
    "\"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"a\": [1, 2.5, null, true]}}}]}, {\"role\": "
    "\"tool\", \"tool_call_id\": \"c1\", \"content\": \"42\"}], \"tools\": [{\"type\": \"function\", \"function\": "
    "{\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}}]}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static cJSON *vars;
    if (!vars) vars = cJSON_Parse(VARS);
    kvt_jinja *t = NULL;
    if (kvt_jinja_parse((const char *)data, size, &t)) {
        if (!*kvt_errmsg()) abort(); /* a refusal says why */
        return 0;
    }
    kvt_jinja_limits lim = {.max_output = 1 << 16, .max_steps = 20000, .max_depth = 16, .max_memory = 8 << 20};
    char *out = NULL;
    size_t len = 0;
    int rc = kvt_jinja_render(t, vars, &lim, &out, &len);
    if (rc && (rc != KVT_EFORMAT && rc != KVT_ELIMIT)) abort();
    if (rc && (out || !*kvt_errmsg())) abort();
    if (!rc && (!out || len > lim.max_output || out[len])) abort();
    free(out);
    kvt_jinja_free(t);
    return 0;
}
