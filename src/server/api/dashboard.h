// SPDX-License-Identifier: MIT
/* The live dashboard `kvtier serve` answers at GET /dashboard: one HTML page,
 * everything inline (no external script, style, font or image: the response
 * carries a Content-Security-Policy that forbids them), rendered on the server
 * from the /metrics exposition text, so its numbers are there without any
 * script: tier occupancy and budgets, reuse by tier, requests and latency,
 * sessions and pins, disk and remote I/O, the process, and the last requests
 * with their tokens by tier and where reuse stopped. Where the browser may
 * read /metrics itself (no key, or a proxy that adds it), a small inline
 * script refreshes every figure every few seconds (the last requests from
 * GET /dashboard/requests) and draws the hit rate over time from the
 * counters' deltas.
 *
 * Thread-safety: pure functions. */
#ifndef KVT_DASHBOARD_H
#define KVT_DASHBOARD_H

#include <stdint.h>

#include "dashboard_ring.h"

/* The page for one /metrics text (kvt_metrics_render's) and the last
 * requests (reqs[n_reqs], newest first; kvt_req_ring_take's): malloc'd,
 * NUL-terminated; the caller frees it. */
char *kvt_dashboard_html(const char *metrics_text, const kvt_req_entry *reqs, int32_t n_reqs);

/* The Content-Security-Policy the page is served with. */
#define KVT_DASHBOARD_CSP \
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; " \
    "img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

/* The value of one series ("name" or `name{labels}`, exactly as rendered) in
 * a metrics text, or def when it is absent. */
double kvt_dashboard_value(const char *metrics_text, const char *series, double def);

#endif
