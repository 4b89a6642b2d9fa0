// SPDX-License-Identifier: MIT
/* What api_tools.c (rendering calls, the forced-call grammar) and
 * api_tools_read.c (reading calls back) share: how a family writes a call,
 * and what a tool name may be. Private to src/server/api/.
 *
 * Thread-safety: reentrant. */
#ifndef KVT_API_TOOLS_IMPL_H
#define KVT_API_TOOLS_IMPL_H

#include "chat.h"

/* How a family writes one call: PRE name MID arguments TAIL; args_key is the arguments' key. */
typedef struct {
    const char *pre, *mid, *tail, *args_key;
} kvt_api_call_style;

kvt_api_call_style kvt_api_call_style_of(kvt_chat_family f);

/* 1 when s is a tool name: 1 to KVT_API_MAX_TOOL_NAME of a-z, A-Z, 0-9, _ and -. */
int kvt_api_tool_name_ok(const char *s);

#endif
