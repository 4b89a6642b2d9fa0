/* PLACEHOLDER: the default model for `kvtier run` without -m. The real
 * implementation (generate a random-weight model into a cache dir) replaces
 * this file; until then it fails with a message. */
#include "cli.h"
#include "common.h"

int kvt_default_model_path(char *buf, size_t cap) {
    if (cap) buf[0] = 0;
    return kvt_fail(KVT_EUNSUPPORTED, "the default model is not implemented yet; pass -m MODEL");
}
