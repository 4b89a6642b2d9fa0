/* Chat templates: recognises the family of a model's tokenizer.chat_template
 * (ChatML, Llama 3, Llama 2, Mistral) and renders conversations for it. */
#ifndef KVT_CHAT_H
#define KVT_CHAT_H

typedef enum {
    KVT_CHAT_UNKNOWN = 0,
    KVT_CHAT_CHATML,
    KVT_CHAT_LLAMA3,
    KVT_CHAT_LLAMA2,
    KVT_CHAT_MISTRAL,
} kvt_chat_family;

/* Family of a Jinja template by its markers; KVT_CHAT_UNKNOWN for NULL or unrecognised. */
kvt_chat_family kvt_chat_detect(const char *tmpl);
/* "chatml", "llama3", "llama2", "mistral" or "unknown". */
const char *kvt_chat_family_name(kvt_chat_family f);

#endif
