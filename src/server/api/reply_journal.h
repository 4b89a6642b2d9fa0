// SPDX-License-Identifier: MIT
/* The reply map kept across restarts: a journal file in T2's directory
 * (side-replies) that holds one record per reply put (chat.h's records), so
 * that a restarted server still splices the replies it generated as their
 * exact ids and a conversation keeps reusing its KV from T2.
 *
 * File (little-endian, format version 2): a 40-byte head, 0 8B magic
 * "kvtrjrnl", 8 u32 format version, 12 16B namespace (the cache's unsalted
 * root: model fingerprint, KV layout and dtype, block size, numerics), 28
 * u32 MAC scheme (KVT_DISK_SCHEME_*), 32 u32 key id (the directory key's, as
 * T2 records carry it), 36 u32 CRC32C of bytes 0..36; then records, each
 * chat.h's record (u32 body bytes, u32 CRC32C of the body, the body) and a
 * KVT_DISK_MAC_BYTES MAC field: kvt_disk_mac under the directory's key of
 * head[0..36) followed by the record. Appended with one write each and no
 * fsync (a crash may lose the last few, never serve a damaged one). The CRC
 * is kept beside the MAC: it tells a torn or flipped record (an accident)
 * from one signed otherwise (someone who can write the directory but lacks
 * its key), in the log and in kvtier cache verify.
 *
 * Unsigned (T2's MAC off, --kv-disk-no-mac: the operator trusts the
 * directory): the head's scheme is 0xffffffff ("none") and its key id 0, and
 * records carry no MAC field, only their CRCs.
 *
 * Open: with MAC off, the journal is unsigned, and a journal of either kind
 * is replayed on its CRCs (a signed one's MACs are not checked, as T2 then
 * takes its records on their CRCs: whoever could forge one could as well
 * write an unsigned journal). With MAC on but no key (none could be made)
 * there is no journal, with an info line. With a key, an unsigned journal is
 * not read, with an info line: its records could be anyone's. A journal of
 * another namespace (another model: its ids are another vocabulary's),
 * signed under another key (copied from another directory), under a scheme
 * not computed here, or of another format version (1: records with a CRC
 * alone, not trusted) is not read, with an info line; a damaged head, a
 * record that is cut short, fails its CRC or MAC or does not decode stops
 * the replay there with one warning naming the file and offset, keeping the
 * records before it; a link or a non-regular file under the name is never
 * followed, with a warning. In every case the file is then written afresh
 * from the map (temp file, fsync, rename, directory fsync), which drops the
 * damage, and opened for appending. When appends make the file hold more
 * than twice the map's capacity, it is rewritten from the map the same way.
 * The first error writing it (a full disk) is logged once and ends
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

/* What kvtier cache verify finds in a directory's journal. */
typedef struct {
    size_t bytes;         /* of the file */
    size_t records;       /* records found (a bad one whose length holds is stepped over to count the rest) */
    size_t good;          /* those whose CRC and MAC hold and that decode */
    size_t bad_at;        /* offset of the first bad record, when good < records */
    int problem;          /* verify must fail: damage, a record that does not verify, a head signed under
                        another key or scheme, no key file, or a link or non-regular file under the name */
    int old_format;       /* another format version: not checked, replaced by the server's next start */
    int unsigned_records; /* records without a MAC (--kv-disk-no-mac), checked on their CRCs: good in a directory
                             without a key file, a problem in one with it */
    char why[200];        /* what is wrong (the first thing), or "" */
} kvt_reply_journal_report;

/* Checks dir's journal as a reader (no lock, beside a live server; never
 * through a link) with the directory's key file: every record's length, CRC,
 * MAC and contents (ids are not checked against a vocabulary: no model here).
 * Returns 0 with *out, or KVT_ENOTFOUND when there is no journal. */
int kvt_reply_journal_verify(const char *dir, kvt_reply_journal_report *out);

#endif
