// SPDX-License-Identifier: MIT
/* Progress lines for long work (a disk tier's open scan, `cache verify` and
 * `gc`, loading a large model): "progress: WHAT: DONE/TOTAL UNIT (P%), S s".
 *
 * A line goes through kvt_log (info), at most one per KVT_PROGRESS_INTERVAL_S,
 * and only where someone is waiting for it: at once when stderr is a terminal
 * (or KVT_PROGRESS is set in the environment, or a command's --progress
 * forced it), else only once the work has run for KVT_PROGRESS_QUIET_S.
 * Short work prints nothing, except when forced: then every piece of work
 * prints its first line at kvt_progress_begin, so its start and end are
 * there however fast it is. kvt_progress_end prints a closing line if any
 * line was printed.
 *
 * Thread-safety: one kvt_progress per thread of work; no shared state. */
#ifndef KVT_PROGRESS_H
#define KVT_PROGRESS_H

#include <stdint.h>

#define KVT_PROGRESS_INTERVAL_S 1.0
#define KVT_PROGRESS_QUIET_S 2.0

typedef struct {
    char what[96];
    char id[72]; /* the request the work is for ("" if none): after what in the text, request_id in JSON */
    const char *unit;
    uint64_t total; /* 0: unknown */
    double start, last;
    int eager; /* a terminal or KVT_PROGRESS: print from the first interval */
    int shown; /* lines printed */
} kvt_progress;

/* Progress lines from the start, whatever stderr is (a command's --progress):
 * set once at start-up, before other threads start work. */
void kvt_progress_set_forced(int on);
int kvt_progress_forced(void);
/* Whether someone is watching for progress: stderr is a terminal,
 * KVT_PROGRESS is set, or it was forced. Work that is only worth a line on
 * a terminal (a long prefill) asks this before it starts tracking. */
int kvt_progress_wanted(void);

/* Starts tracking work on `what` (copied), of total units (0 if unknown). */
void kvt_progress_begin(kvt_progress *p, const char *what, uint64_t total, const char *unit);
/* The same for work done for a request: its id (copied; NULL: none) in every
 * line, "progress: prefill ID: 0/900 tokens (0%), 0.0 s", and as request_id
 * in JSON logs. */
void kvt_progress_begin_for(kvt_progress *p, const char *what, const char *id, uint64_t total, const char *unit);
/* Notes that done units are finished; prints a line when one is due. */
void kvt_progress_update(kvt_progress *p, uint64_t done);
/* Ends the work; prints "done" with the elapsed time if a line was printed. */
void kvt_progress_end(kvt_progress *p, uint64_t done);

#endif
