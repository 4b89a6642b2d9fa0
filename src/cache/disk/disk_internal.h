// SPDX-License-Identifier: MIT
/* The disk tier's private parts (tier_disk.h is the contract), shared by the
 * files of src/cache/disk and included by nothing outside it:
 *   tier_disk.c    open (the scan of the directory's segments), close, the
 *                  owner API and the tier interface (tier.h)
 *   disk_index.c   the record index, the live segments, the events that keep
 *                  the prefix index in step: the store's other files call
 *                  down into it, it calls none of them
 *   disk_writer.c  the writer thread: queue drain, segment rotation, reclaim
 *   disk_read.c    batched verified reads
 *   disk_ckpt.c    the index checkpoint, written and loaded
 *   disk_record.c  the record format: header fields, MAC, codec
 *   disk_dir.c     the directory's files: header, key, lock, segment names
 *   disk_scan.c    segment scans and their read-ahead
 *   disk_io.c      the I/O backend (io_uring, else pread/pwrite)
 *   disk_maint.c   the maintenance walks behind `kvtier cache`
 * The contract of everything here is tier_disk.h's: the record layout, the
 * directory rules (every file opened relative to the directory's fd, never
 * through a symlink, only regular files, temporaries O_EXCL) and what a MAC
 * binds.
 *
 * Errors: functions returning int give 0 (or a count/fd >= 0) or a negative
 * error whose message (kvt_errmsg) says why, unless said otherwise.
 * Thread-safety: the record, directory and scan functions are reentrant; a
 * mac_key is read-only once prepared. The store's state (kvt_disk, below)
 * has its own rules, given there. */
#ifndef KVT_DISK_INTERNAL_H
#define KVT_DISK_INTERNAL_H

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sodium.h>
#include <zstd.h>

#include "hmap128.h"
#include "threadpool.h"
#include "tier_disk.h"

/* ---- the record format (disk_record.c) ---------------------------------- */

/* Record header field offsets (see tier_disk.h for the layout). */
enum {
    RH_MAGIC = 0,
    RH_VERSION = 4,
    RH_CODEC = 6,
    RH_HEADER_BYTES = 8,
    RH_BLOCK_TOKENS = 12,
    RH_PAYLOAD_BYTES = 16,
    RH_STORED_BYTES = 24,
    RH_NS = 32,
    RH_HASH = 48,
    RH_PARENT = 64,
    RH_HEADER_CRC = 80,
    RH_CRC = 84,
    RH_FLAGS = 88,
    RH_KEY_ID = 92,
    RH_MAC = 96,
    RH_TOKENS = KVT_DISK_HEADER_FIXED,
};
#define RH_CRC_FIELDS_BYTES 8 /* both CRC fields, read as zero while checksumming */

/* KVT_DISK_MAC_SCHEME=blake2b: behave as a CPU without AES-GCM (tests, benchmarks). */
#define MAC_SCHEME_ENV "KVT_DISK_MAC_SCHEME"
#define MAC_SCHEME_PORTABLE "blake2b"

/* Little-endian fields of the on-disk formats (records, the index checkpoint),
 * read and written through memcpy: any alignment. */
static inline uint32_t disk_rd32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline uint64_t disk_rd64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static inline kvt_hash128 disk_rdh(const uint8_t *p) {
    kvt_hash128 h;
    memcpy(&h.lo, p, 8);
    memcpy(&h.hi, p + 8, 8);
    return h;
}
static inline void disk_wr16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static inline void disk_wr32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void disk_wr64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static inline void disk_wrh(uint8_t *p, kvt_hash128 h) {
    memcpy(p, &h.lo, 8);
    memcpy(p + 8, &h.hi, 8);
}

/* n rounded up to the next KVT_DISK_ALIGN boundary: a record's padded length. */
static inline uint64_t kvt_disk_align_up(uint64_t n) {
    return (n + KVT_DISK_ALIGN - 1) / KVT_DISK_ALIGN * KVT_DISK_ALIGN;
}

/* A directory's MAC key, its id, and what this process computes with it. The
 * id (a keyed hash of a constant: it says nothing about the key) is stored in
 * every record, so a scan can tell a record signed under another key (the key
 * file was lost: a miss) from a forged one (its MAC fails at read: corrupt)
 * without reading payloads. */
typedef struct {
    uint8_t bytes[KVT_DISK_KEY_BYTES]; /* the directory's key: BLAKE2b's key */
    uint32_t id;
    int gmac;                        /* GMAC is computed here: gcm is set */
    crypto_aead_aes256gcm_state gcm; /* the derived AES-256 key, expanded once */
} mac_key;

/* Fills in k's id and, where GMAC is computed, its AES key; k->bytes is set. */
void kvt_disk_key_prepare(mac_key *k);

/* Checks a fully parsed record's MAC under k, in constant time; buf is the
 * record's bytes (r->raw), writable. Returns 0, KVT_EFORMAT (no MAC, or a
 * mismatch) or KVT_EUNSUPPORTED (a scheme not computed here). */
int kvt_disk_record_verify(const kvt_disk_record *r, const mac_key *k, uint8_t *buf);

/* 1 if k (may be NULL) can check r's MAC: it carries one, under k's id and a
 * scheme usable here. */
int kvt_disk_mac_checkable(const mac_key *k, const kvt_disk_record *r);

/* kvt_disk_record_decode with a reusable zstd context (dc may be NULL). */
int kvt_disk_decode_with(ZSTD_DCtx *dc, const kvt_disk_record *r, void *out, size_t cap);

/* Writes a record header into h for a stored payload at h + header bytes, its
 * MAC under key (none when NULL) and both CRCs; zeroes the padding. Returns
 * the padded record length. */
uint64_t kvt_disk_encode_with(uint8_t *h, uint32_t B, kvt_disk_codec codec, uint64_t payload_bytes,
                              uint64_t stored_bytes, kvt_hash128 ns, kvt_hash128 hash, kvt_hash128 parent,
                              const mac_key *key);

/* ---- the directory (disk_dir.c) ----------------------------------------- */

#define TMP_SUFFIX ".tmp"
/* The index checkpoint (disk_ckpt.c) and its temporary. */
#define CKPT_NAME "index"
#define CKPT_TMP_NAME "index.tmp"
#define SEG_NAME_MAX 64
#define TMP_NAME_MAX (SEG_NAME_MAX + sizeof TMP_SUFFIX)
/* The directory and its files are ours alone (see kvt_disk_dir_open). */
#define DIR_MODE 0700
#define FILE_MODE 0600
/* Header reads during a scan: enough for the largest header (B = KVT_BLOCK_TOKENS_MAX). */
#define SCAN_READ_BYTES (2 * KVT_DISK_ALIGN)

/* How kvt_disk_dir_open treats the directory. Writers (the store, gc, clear)
 * must own it; readers (walk, header, lifetime) write nothing, so they may
 * inspect another user's directory, but still never follow a link to reach it. */
enum { DIR_READ = 0, DIR_OWNED = 1, DIR_CREATE = 2 };

/* Opens the cache directory (how: DIR_*) and returns its fd. */
int kvt_disk_dir_open(const char *dir, int how);
/* Opens a file of the directory dfd: never through a symlink, only a regular
 * file, and one opened for writing has no other hard link. Returns the fd. */
int kvt_disk_file_open(int dfd, const char *dir, const char *name, int flags, mode_t mode);
/* Creates name in dfd afresh (unlinked first, then O_EXCL), 0600. Returns the fd. */
int kvt_disk_tmp_create(int dfd, const char *dir, const char *name, int extra_flags);
/* Takes the directory's exclusive lock: the lock fd, or -1 with *unlocked set
 * where no lock file can exist (read-only, never used), or a negative error. */
int kvt_disk_lock_dir(int dfd, const char *dir, int *unlocked);

/* Whether dfd may become (or stay) a cache directory: it holds a kvtier
 * header, or nothing (*fresh); with check_key its key file is also checked.
 * Writes nothing, but for the header of namespace *init_ns (may be NULL) in
 * an empty directory, crash-safely. Returns 0, or a negative error naming
 * what was found. */
int kvt_disk_dir_adopt(int dfd, const char *dir, int check_key, const kvt_hash128 *init_ns, int *fresh);

/* The header file: written atomically. Read: 0 with its version and namespace
 * (of any version: comparing is the caller's), KVT_ENOTFOUND (none), or
 * KVT_EFORMAT with *ours 0 (not a kvtier header: someone else's file) or 1 (a
 * kvtier header whose lines are damaged); the message says which. */
int kvt_disk_write_header(int dfd, const char *dir, kvt_hash128 ns);
int kvt_disk_read_header_at(int dfd, const char *dir, uint32_t *version, kvt_hash128 *ns, int *ours);

/* The key file: loaded (libsodium started, then the file read: KVT_ENOTFOUND
 * when there is none, KVT_EUNSUPPORTED when libsodium cannot start; refused
 * unless owner's, 0600, and whole) or created (lock held). Both prepare *key. */
int kvt_disk_key_load(int dfd, const char *dir, uid_t owner, mac_key *key);
int kvt_disk_key_create(int dfd, const char *dir, mac_key *key);

/* Segment names: 1 and *id if name is one; the name of segment id. */
int kvt_disk_parse_seg_name(const char *name, uint64_t *id);
void kvt_disk_seg_name(char *out, size_t cap, uint64_t id);
/* 1 if name is a segment's temporary (compact's rewrite: a SEG_PREFIX name ending in TMP_SUFFIX). */
int kvt_disk_is_seg_tmp_name(const char *name);
/* A fresh directory stream over dfd; NULL with errno set on failure. */
DIR *kvt_disk_dir_list(int dfd);
/* Segment ids in dfd, ascending: the count and *ids (caller frees), or -errno. */
long kvt_disk_list_segments(int dfd, const char *dir, int warn_foreign, uint64_t **ids);

/* n bytes (rounded up to KVT_DISK_ALIGN) aligned for O_DIRECT; aborts when out of memory. */
void *kvt_disk_aligned_buf(size_t n);

/* ---- the I/O backend (disk_io.c) --------------------------------------- */

/* Batches of positioned reads issued together (io_uring when the kernel
 * allows it, else one pread after another) and whole positioned writes.
 * Buffers, offsets and lengths are the caller's business; with O_DIRECT file
 * descriptors they must be suitably aligned. */
typedef struct kvt_dio kvt_dio;

/* One positioned read of a batch. `res` is filled in: the bytes read (less
 * than len only at end of file) or -errno. `user` is the caller's. */
typedef struct {
    int fd;
    uint64_t off;
    size_t len;
    void *buf;
    ssize_t res;
    void *user;
} kvt_dio_req;

/* Called once per request of a batch as it completes, in completion order,
 * on the thread that called kvt_dio_read_batch. */
typedef void (*kvt_dio_done_fn)(void *ctx, kvt_dio_req *req);

/* The res of a request submitted and not completed yet. */
#define KVT_DIO_PENDING (-EINPROGRESS)

/* Creates a backend with up to `depth` reads in flight (>= 1). If want_uring
 * is nonzero, tries io_uring and silently falls back to pread/pwrite when the
 * kernel refuses it (the caller logs kvt_dio_uses_uring()). Returns 0 and
 * *out. Owned by the caller; free with kvt_dio_free. Not thread-safe: one
 * backend per thread that does I/O. */
int kvt_dio_new(unsigned depth, int want_uring, kvt_dio **out);
void kvt_dio_free(kvt_dio *io); /* none of its reads may be in flight (kvt_dio_inflight) */
/* 1 if the backend submits through io_uring. */
int kvt_dio_uses_uring(const kvt_dio *io);

/* Reads every request of reqs[0..n), keeping up to depth in flight, and calls
 * done for each as it completes (done may be NULL). A short read is
 * continued synchronously, so res < len means end of file or an error. */
void kvt_dio_read_batch(kvt_dio *io, kvt_dio_req *reqs, size_t n, kvt_dio_done_fn done, void *ctx);

/* The same, without waiting: queues reqs[0..n) (as many as the depth leaves
 * room for) and hands them to the kernel, so that they are read while the
 * caller does other work; each res is KVT_DIO_PENDING until its request
 * completes. Returns how many were queued; submit the rest after a reap. The
 * pread fallback reads them all now and calls done for each before returning.
 * The requests and their buffers must stay valid until they complete. */
size_t kvt_dio_submit(kvt_dio *io, kvt_dio_req *reqs, size_t n, kvt_dio_done_fn done, void *ctx);
/* Completes every queued read that has finished (res filled in, a short read
 * continued synchronously as above, done called), first waiting for one if
 * wait is nonzero and any is in flight. Returns how many completed. */
size_t kvt_dio_reap(kvt_dio *io, int wait, kvt_dio_done_fn done, void *ctx);
/* Reads queued and not yet completed. */
unsigned kvt_dio_inflight(const kvt_dio *io);

/* Writes buf[0..len) at off in full. Returns 0 or -errno (-ENOSPC, -EIO,
 * -EFBIG ...; a write that makes no progress is -EIO). */
int kvt_dio_write(kvt_dio *io, int fd, const void *buf, size_t len, uint64_t off);


/* ---- segment scans (disk_scan.c) ----------------------------------------- */

/* Called per record (status 0, rec parsed; raw the whole verified record when
 * the scan verifies) or per bad step (status < 0) of a segment scan. A nonzero
 * return ends the scan. rec's pointers are valid during the call only. */
typedef int (*kvt_disk_scan_fn)(void *ctx, uint64_t off, uint64_t bytes, int status, const kvt_disk_record *rec,
                                const uint8_t *raw);

/* Where a scan reads its headers from, ahead of the walk: windows of reads
 * (io_uring when the kernel allows it) into buffers of its own, several
 * windows in flight at once, so that the disk reads ahead while the walk
 * parses. Records up to SCAN_CHUNK_STRIDE_MAX long are read whole, a window
 * of SCAN_WINDOW_BYTES of the segment at a time, and parsed from memory;
 * longer ones one header read each (the whole record when the scan
 * verifies), at the offsets the last record's length predicts. Every byte it
 * hands the parser is what a pread at that offset returns (a missed
 * prediction or a failed read falls back to that pread), so a scan through a
 * reader finds exactly what the one-read-per-header scan finds. Owned by the
 * caller; one thread at a time. */
typedef struct kvt_disk_scan_reader kvt_disk_scan_reader;

/* Records up to this long are read whole (in chunks) rather than header by header. */
#define SCAN_CHUNK_STRIDE_MAX (32u << 10)
/* The default shape of a reader: windows in flight together, and the bytes
 * of a segment one window covers (see kvt_disk_scan_reader_shape). */
#define SCAN_WINDOWS 4
#define SCAN_WINDOWS_MAX 8
#define SCAN_WINDOW_BYTES (8u << 20)

/* Counters of a reader, summed over its scans. */
typedef struct {
    uint64_t batches;       /* batches (windows) of reads issued together */
    uint64_t reads;         /* positioned reads, including fallbacks */
    uint64_t fallbacks;     /* offsets read on their own (a missed prediction, a failed batched read) */
    uint64_t bytes;         /* bytes those reads returned */
    uint64_t peak_windows;  /* the most windows in flight at once */
    uint64_t whole_records; /* records a verifying scan checked straight from a window (no read of their own) */
} kvt_disk_scan_counts;

/* A reader for records of about hint bytes (the store's padded record; 0:
 * unknown). use_uring: try io_uring (else batches are preads one after
 * another, still large). Never fails (aborts when out of memory). */
kvt_disk_scan_reader *kvt_disk_scan_reader_new(uint64_t hint, int use_uring);
/* Reshapes rd before its first scan: windows of window_bytes (rounded up to
 * KVT_DISK_ALIGN, at least SCAN_READ_BYTES, at most 63 MiB), depth of them
 * in flight (1 to SCAN_WINDOWS_MAX; 1 issues a window only when the walk has
 * passed the last one). For tests (many small windows) and benchmarks. */
void kvt_disk_scan_reader_shape(kvt_disk_scan_reader *rd, uint64_t window_bytes, unsigned depth);
void kvt_disk_scan_reader_free(kvt_disk_scan_reader *rd);
void kvt_disk_scan_reader_counts(const kvt_disk_scan_reader *rd, kvt_disk_scan_counts *out);

/* Walks the records of one segment file (fd, size bytes) from offset start (0,
 * or a record boundary: the end of what an index checkpoint covers). Each
 * header is read with one pread into buf (an aligned scratch of
 * SCAN_READ_BYTES) when rd is NULL, else through rd (buf unused); reads rd
 * issued ahead are waited for before it returns. A bad header is stepped
 * over one KVT_DISK_ALIGN at a time, so the next intact record is found again;
 * a record running past size (a torn tail) is reported corrupt and ends the
 * walk. With verify, each record is read whole (from rd's window when that
 * holds it, else into *vbuf, aligned, grown to *vcap as needed) and its CRC
 * checked, and its MAC if key can check it (see kvt_disk_mac_checkable). Calls fn per record or bad step. Returns 0 or fn's
 * nonzero value. */
int kvt_disk_scan_segment_from(int fd, uint64_t start, uint64_t size, int verify, const mac_key *key,
                               kvt_disk_scan_reader *rd, uint8_t *buf, uint8_t **vbuf, size_t *vcap,
                               kvt_disk_scan_fn fn, void *ctx);

/* Removes the index checkpoint and its temporary (disk_ckpt.c): gc and clear
 * change segments it describes. */
void kvt_disk_ckpt_remove(int dfd);

/* Tries O_DIRECT in the directory: 0 if an aligned write and read work. */
int kvt_disk_probe_o_direct(int dfd, const char *dir);

/* Adds session's counters to the directory's lifetime file (temp, fsync,
 * rename). Best effort: a read-only or full directory keeps the old file. */
void kvt_disk_lifetime_add(int dfd, const char *dir, const kvt_disk_lifetime *session);


/* ---- the store (tier_disk.c, disk_index.c, disk_writer.c, disk_read.c, disk_ckpt.c) ---- */

/* Threading (tier_disk.h "Threads"): two threads touch a kvt_disk, the owner's
 * and the writer. d->mu guards every field the writer touches; the fields
 * marked "owner thread only" or "writer thread only" are unlocked. Functions
 * below say "mu held" where the caller must hold d->mu. */

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

    pthread_mutex_t mu;                       /* guards everything below that the writer touches */
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

    int write_err;     /* first write error; writes are disabled once set (and enabled again after space_wait) */
    int space_wait;    /* write_err is a lack of space: the writer looks for room every p.space_retry_s */
    double space_next; /* kvt_now() of its next look */
    uint8_t *ckpt_buf; /* a checkpoint for the writer to write (periodic), or NULL */
    size_t ckpt_len;
    uint64_t lookup_blocks, lookup_hits; /* kvt_disk_note_lookup, this session */

    /* owner thread only */
    double ckpt_last;   /* when the last periodic checkpoint was taken (or the open) */
    uint64_t ckpt_mark; /* the store's change count then (puts, evictions, removes, moves) */
    kvt_dio *rio;
    uint8_t *rbuf;
    size_t rbuf_cap;
    ZSTD_DCtx *zd;
    kvt_pool *rpool; /* the read batches' second checking thread (disk_read.c), made at the first need */
    ZSTD_DCtx *zd2;  /* that thread's decoder */

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

/* ---- the record index (disk_index.c) ---- */

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
/* Loads dir's checkpoint for its segment table alone (kvtier cache, which
 * has no store and takes no lock): checked for format, lengths and CRC, not
 * for a store's parameters. 0 and *c (kvt_disk_ckpt_free it), KVT_ENOTFOUND,
 * or KVT_EFORMAT. */
int kvt_disk_ckpt_load_segments(int dfd, const char *dir, disk_ckpt *c);
/* The bytes c recorded for segment id when sb is the same file (its inode),
 * else 0. Segments only grow between checkpoints (a failed append is trimmed
 * back to where it began), so a file shorter than this was cut. */
uint64_t kvt_disk_ckpt_recorded(const disk_ckpt *c, uint64_t id, const struct stat *sb);
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
