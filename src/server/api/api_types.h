// SPDX-License-Identifier: MIT
/* The JSON type of every request field kvtier reads or accepts, checked
 * before any field's value is: one table per kind of body (api_types.c)
 * names each field by its path ("messages[].tool_calls[].function.name",
 * "metadata.*") and the JSON types it may hold. A field of another type is
 * a 400 "invalid_type" whose param is the field's place in this body
 * ("messages[2].name", "tools[0].function.strict", "metadata.team"), as
 * OpenAI names it, even where the field never changes the output ("user",
 * "store"). Null stands for "absent" wherever kvtier treats it so (most
 * optional fields); a field of an unknown name is not looked at (unknown
 * fields are ignored unless serve --strict). The values themselves (ranges,
 * names, the neutral values of the audited fields) are the parsers'.
 * Private to src/server/.
 *
 * Thread-safety: reentrant (no shared state). */
#ifndef KVT_API_TYPES_H
#define KVT_API_TYPES_H

#include "api_body.h"

struct cJSON;

/* Checks root, a parsed body of kind. Returns 0, or KVT_EARG with *err a
 * 400 naming the first field whose type is wrong (param kept in
 * err->param_text). A root that is not an object is left to the caller. */
int kvt_api_check_types(kvt_api_body kind, const struct cJSON *root, kvt_api_error *err);

#endif
