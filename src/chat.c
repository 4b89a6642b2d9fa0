/* Chat template detection (rendering lands with the server). Templates are
 * recognised by the special markers each family uses, not by executing Jinja. */
#include "chat.h"

#include <string.h>

kvt_chat_family kvt_chat_detect(const char *t) {
    if (!t) return KVT_CHAT_UNKNOWN;
    if (strstr(t, "<|im_start|>")) return KVT_CHAT_CHATML;
    if (strstr(t, "<|start_header_id|>")) return KVT_CHAT_LLAMA3;
    if (strstr(t, "[INST]")) return strstr(t, "<<SYS>>") ? KVT_CHAT_LLAMA2 : KVT_CHAT_MISTRAL;
    return KVT_CHAT_UNKNOWN;
}

const char *kvt_chat_family_name(kvt_chat_family f) {
    switch (f) {
    case KVT_CHAT_CHATML: return "chatml";
    case KVT_CHAT_LLAMA3: return "llama3";
    case KVT_CHAT_LLAMA2: return "llama2";
    case KVT_CHAT_MISTRAL: return "mistral";
    default: return "unknown";
    }
}
