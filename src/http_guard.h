/* Defences of kvtier's HTTP layer that libmicrohttpd (0.9.75) does not give:
 * a budget for the request bodies held in memory at once, so many large
 * requests together answer 503 instead of exhausting memory.
 *
 * Thread-safety: every function may be called from any thread (one mutex). */
#ifndef KVT_HTTP_GUARD_H
#define KVT_HTTP_GUARD_H

#include <stdint.h>

typedef struct kvt_http_guard kvt_http_guard;

/* A guard whose body budget is max_inflight_bytes (0: no budget). Free with
 * kvt_http_guard_free. */
kvt_http_guard *kvt_http_guard_new(uint64_t max_inflight_bytes);
void kvt_http_guard_free(kvt_http_guard *g);

/* Takes n bytes of the body budget for a request about to hold them. Returns
 * 0, or -1 (nothing taken) when they would put the bytes held past the
 * budget. Every byte taken is given back with kvt_http_guard_release. */
int kvt_http_guard_reserve(kvt_http_guard *g, uint64_t n);
void kvt_http_guard_release(kvt_http_guard *g, uint64_t n);

/* Body bytes held now (for tests and metrics). */
uint64_t kvt_http_guard_held(kvt_http_guard *g);

#endif
