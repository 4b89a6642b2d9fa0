// SPDX-License-Identifier: MIT
/* The reply map kept across restarts: a journal file in T2's directory
 * (side-replies) that holds one record per reply put (chat.h's records), so
 * that a restarted server still splices the replies it generated as their
 * exact ids and a conversation keeps reusing its KV from T2.
 *
 * File (little-endian): a 32-byte head, 0 8B magic "kvtrjrnl", 8 u32 format
 * version, 12 16B namespace (the cache's unsalted root: model fingerprint,
 * KV layout and dtype, block size, numerics), 28 u32 CRC32C of bytes 0..28;
 * then records, appended with one write each and no fsync (a crash may lose
 * the last few, never serve a damaged one: each has its length and CRC).
 *
 * Open: a journal of another namespace (another model: its ids are another
 * vocabulary's) is not read, with an info line; a damaged head, record or
 * tail stops the replay there with one warning naming the file and offset,
 * keeping the records before it; a link or a non-regular file under the name
 * is never followed, with a warning. In every case the file is then written
 * afresh from the map (temp file, fsync, rename, directory fsync), which
 * drops the damage, and opened for appending. When appends make the file
 * hold more than twice the map's capacity, it is rewritten from the map the
 * same way. The first error writing it (a full disk) is logged once and ends
 * persistence for the process; requests never fail for it.
 *
 * Thread-safe: append may be called from any thread. */
#ifndef KVT_REPLY_JOURNAL_H
#define KVT_REPLY_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include "cache.h"
#include "chat.h"

#define KVT_REPLY_JOURNAL_NAME "side-replies"

typedef struct kvt_reply_journal kvt_reply_journal;

/* Replays c's journal into m (which holds at most cap entries and must
 * outlive the journal; ids checked against n_vocab) and opens it for
 * appending. NULL when c has no T2 or the journal cannot be written (said in
 * the log); never stops the start. */
kvt_reply_journal *kvt_reply_journal_open(kvt_cache *c, kvt_reply_map *m, size_t cap, int32_t n_vocab);
/* Appends one record (from kvt_reply_map_put_rec); j NULL: nothing. */
void kvt_reply_journal_append(kvt_reply_journal *j, const uint8_t *rec, size_t n);
void kvt_reply_journal_free(kvt_reply_journal *j);

#endif
