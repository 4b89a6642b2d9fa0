// SPDX-License-Identifier: MIT
/* The disk store's state, private to the files that make it up: tier_disk.c
 * (open, close, the owner API, the record index and its events), disk_writer.c
 * (the writer thread: queue drain, segment rotation and reclaim) and
 * disk_read.c (batched verified reads). Nothing outside them includes it.
 *
 * Threading (tier_disk.h "Threads"): two threads touch a kvt_disk, the owner's
 * and the writer. d->mu guards every field the writer touches; the fields
 * marked "owner thread only" or "writer thread only" are unlocked. Functions
 * below say "mu held" where the caller must hold d->mu. */
#ifndef KVT_DISK_STORE_H
#define KVT_DISK_STORE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <zstd.h>

#include "disk_internal.h"
#include "disk_io.h"
#include "hmap128.h"
#include "tier_disk.h"

/* Dropped writes are logged: the first few, then one in this many. */
#define DROP_LOG_FIRST 5
#define DROP_LOG_EVERY 1000

typedef struct disk_seg {
    uint64_t id;
    int fd;
    uint64_t bytes; /* file length: records appended so far */
    uint32_t refs;  /* reads (and reinsertion copies) using fd */
    int dead;       /* reclaimed and unlinked: fd closes with the last ref */
} disk_seg;

typedef struct {
    kvt_hash128 hash;
    disk_seg *seg; /* NULL while a reclaim moves the record (reads miss meanwhile) */
    uint64_t off;
    uint32_t bytes;
    uint8_t used, hit, moving;
} disk_rec;

/* An index update made off the owner's thread, applied by it in order. */
typedef struct {
    int add; /* 1: add (hash, parent, tokens) at slot; 0: remove hash */
    kvt_hash128 hash, parent;
    uint32_t slot;
    int32_t *tokens; /* owned; add only */
} disk_event;

typedef struct {
    kvt_hash128 hash, parent;
    uint8_t *buf;  /* record buffer: tokens at RH_TOKENS, payload at header_bytes */
    int cancelled; /* kvt_disk_remove while queued: the writer skips it (mu) */
} disk_qslot;

struct kvt_disk {
    kvt_disk_params p;
    char *dir;
    int dir_fd; /* every file is opened relative to it, never by path */
    int lock_fd;
    uint32_t header_bytes;
    uint64_t rec_max; /* padded bytes of a raw record */
    int o_direct;
    /* With p.mac: the directory's key, read (or made) at open and constant
     * after, so both threads read it unlocked. key_state says whether records
     * already on disk can be checked with it. */
    mac_key key;
    int key_state;

    pthread_mutex_t mu; /* guards everything below that the writer touches */
    pthread_cond_t cv_work, cv_idle, cv_room; /* cv_room: a queue slot was freed (monotonic clock) */
    pthread_t writer;
    int writer_started, stop;
    int paused; /* kvt_disk_pause_writer */

    disk_qslot *q;
    uint32_t q_head, q_count;
    int writer_busy;

    kvt_hmap128 map; /* key -> slot in recs */
    disk_rec *recs;
    uint32_t n_recs, cap_recs, *free_slots, n_free;

    disk_seg **segs; /* live segments, oldest first; head is the last while open */
    size_t n_segs, cap_segs;
    disk_seg *head;
    uint64_t next_seg_id;

    disk_event *ev;
    size_t n_ev, cap_ev;

    int write_err; /* first write error; writes are disabled once set (and enabled again after space_wait) */
    int space_wait;    /* write_err is a lack of space: the writer looks for room every p.space_retry_s */
    double space_next; /* kvt_now() of its next look */
    uint8_t *ckpt_buf; /* a checkpoint for the writer to write (periodic), or NULL */
    size_t ckpt_len;
    uint64_t lookup_blocks, lookup_hits; /* kvt_disk_note_lookup, this session */

    /* owner thread only */
    double ckpt_last;    /* when the last periodic checkpoint was taken (or the open) */
    uint64_t ckpt_mark;  /* the store's change count then (puts, evictions, removes, moves) */
    kvt_dio *rio;
    uint8_t *rbuf;
    size_t rbuf_cap;
    ZSTD_DCtx *zd;

    /* writer thread only */
    kvt_dio *wio;
    uint8_t *wbuf;
    ZSTD_CCtx *zc;

    kvt_disk_stats st;
};

/* kvt_disk.key_state */
enum {
    KEY_NONE = 0, /* MAC off, or no key (read-only directory without one): MAC'd records are not trusted */
    KEY_NEW,      /* made by this open (any MAC'd record already there was signed with a lost key) */
    KEY_READ,     /* read from the key file */
};

/* One reinsertion candidate taken out of a reclaimed segment. */
typedef struct {
    uint32_t slot;
    uint64_t at; /* offset in the reinsertion buffer */
    uint32_t bytes;
} disk_move;

/* Drops one reference; closes and frees a reclaimed segment with its last. mu held. */
void kvt_disk_seg_unref(disk_seg *s);
/* Queues an index update for the owner's thread (mu held); a no-op without an index. */
void kvt_disk_push_event(kvt_disk *d, int add, kvt_hash128 hash, kvt_hash128 parent, uint32_t slot,
                         const int32_t *tokens);
/* Forgets the record at slot (mu held): map, slot, index (via an event). */
void kvt_disk_rec_drop(kvt_disk *d, uint32_t slot);
/* Stores a record's location, replacing any under the same key (mu held; a
 * replaced record's removal is queued as an event); returns its slot. The
 * prefix index is not told: kvt_disk_rec_insert or kvt_disk_index_add do. */
uint32_t kvt_disk_rec_put(kvt_disk *d, kvt_hash128 hash, disk_seg *seg, uint64_t off, uint32_t bytes);
/* Records a new record, replacing any under the same key (mu held); the
 * prefix index learns of it through an event. */
void kvt_disk_rec_insert(kvt_disk *d, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, disk_seg *seg,
                         uint64_t off, uint32_t bytes);
/* Adds the record at slot to the prefix index at once: the owner's thread,
 * mu held, no event queued (they would apply out of order). A refused add
 * (another block under the key) drops the record and counts a collision. */
void kvt_disk_index_add(kvt_disk *d, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, uint32_t slot);
/* Applies queued index updates; owner's thread, mu held. */
void kvt_disk_apply_events_locked(kvt_disk *d);
/* Bytes in the live segments (mu held). */
uint64_t kvt_disk_segs_bytes(const kvt_disk *d);
/* Appends a segment to the live list, newest last (mu held). */
void kvt_disk_segs_push(kvt_disk *d, disk_seg *s);
/* Disables writes after the first failure, with one warning (mu held). */
void kvt_disk_disable_writes(kvt_disk *d, int err, const char *what);
/* The queue slot holding hash, or NULL (mu held). */
disk_qslot *kvt_disk_queued_slot(kvt_disk *d, kvt_hash128 hash);

/* ---- the index checkpoint (disk_ckpt.c) ---- */

/* A loaded checkpoint: the file's bytes and its two tables. */
typedef struct {
    uint8_t *buf;
    size_t len;
    uint64_t n_segs, n_recs;
    const uint8_t *segs, *recs;
} disk_ckpt;

/* Serialises the record index (owner's thread: it reads the prefix index for
 * each record's parent and tokens; takes mu). A malloc'd buffer and *len, or
 * NULL without a prefix index. */
uint8_t *kvt_disk_ckpt_build(kvt_disk *d, size_t *len);
/* Replaces the directory's checkpoint with buf: temp file, fsync, rename. */
int kvt_disk_ckpt_write(int dfd, const char *dir, const uint8_t *buf, size_t len);
/* Loads the checkpoint for d's parameters and key: 0 and *c, KVT_ENOTFOUND,
 * or KVT_EFORMAT (corrupt, truncated, or taken under other rules; the message
 * says which). */
int kvt_disk_ckpt_load(kvt_disk *d, disk_ckpt *c);
void kvt_disk_ckpt_free(disk_ckpt *c);
/* Bytes of segment id (its fstat sb) that c's records cover, or UINT64_MAX
 * when c does not cover it (absent, another file, or changed since). */
uint64_t kvt_disk_ckpt_covers(const disk_ckpt *c, uint64_t id, const struct stat *sb);
/* Indexes c's records that lie in the covered part of segs[i] (ids
 * ascending; covered[i] from kvt_disk_ckpt_covers). Returns how many. mu held. */
uint64_t kvt_disk_ckpt_apply(kvt_disk *d, const disk_ckpt *c, disk_seg *const *segs, const uint64_t *covered,
                             size_t n_segs);
/* Writes the checkpoint in d->ckpt_buf and frees it: the writer thread, mu
 * held (dropped while writing). */
void kvt_disk_ckpt_write_pending(kvt_disk *d);
/* Changes to the set of records since open (mu held, or before the writer starts). */
uint64_t kvt_disk_change_count(const kvt_disk *d);
/* Hands a fresh checkpoint to the writer thread when one is due: every
 * checkpoint_s seconds, if records changed and the last one is written
 * (owner's thread; takes mu). */
void kvt_disk_ckpt_maybe(kvt_disk *d);

/* Reclaims the oldest segments until the sealed ones fit (mu held); see disk_writer.c. */
size_t kvt_disk_reclaim_locked(kvt_disk *d, uint64_t move_cap, disk_move **moves, size_t *n_moves, disk_seg ***srcs,
                               uint64_t **src_offs);
/* The writer thread's body (pthread_create's start routine; arg is the kvt_disk). */
void *kvt_disk_writer_main(void *arg);

#endif
