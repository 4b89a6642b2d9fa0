// SPDX-License-Identifier: MIT
/* T2, the disk block store (docs/design.md "The tiers", "On-disk format (T2)"): block
 * records appended to fixed-size segment files in one cache directory, found
 * again after a restart, evicted a whole segment at a time, oldest first.
 *
 * Directory. `lock` (flock'd by the one owning process, which writes its pid
 * there, so a second opener is told who holds it), `header` (format version
 * and namespace, replaced atomically: temp file, fsync, rename), and segment
 * files `seg-<16 hex digits>.kvt` whose number gives the FIFO order. Any other
 * file is ignored with a warning. A new segment is started at every open, so
 * a torn tail left by a crash is never appended to.
 *
 * The directory is the user's own. The store, gc and clear create it (and any
 * missing parent) 0700 and refuse, with -EACCES and a message that says how to
 * fix it, one owned by another user or writable by group or others: whoever
 * can write it could plant links, FIFOs or records. The directory is opened
 * once (its last component never through a symlink: -ELOOP) and every file
 * relative to that fd, with O_NOFOLLOW: a file only counts if it is a regular
 * file (a FIFO is never waited on), one we write must have no other hard
 * link, temporaries are created O_EXCL after unlinking whatever holds their
 * name, and renames and unlinks stay inside the directory. A link or FIFO
 * under a segment's name is skipped with a warning; under the lock's name it
 * is refused. Files are created 0600. The readers (walk, read_header,
 * read_lifetime) write nothing and so accept any owner (an administrator may
 * inspect a user's directory), with the same rules for what they open.
 *
 * Record (little-endian), padded with zeros to KVT_DISK_ALIGN so that records
 * start on 4 KiB boundaries and O_DIRECT can read them (format version 3):
 *     0 u32 magic            4 u16 format version    6 u16 codec
 *     8 u32 header bytes (128 + 4B)                 12 u32 B
 *    16 u64 payload bytes (as the caller sees them)
 *    24 u64 stored bytes (after the codec)
 *    32 16B namespace       48 16B block hash       64 16B parent hash
 *    80 u32 header CRC      84 u32 record CRC
 *    88 u32 flags (bit 0: the record carries a MAC; bits 1-3: its scheme,
 *       KVT_DISK_SCHEME_*, 0 without a MAC; other bits 0)
 *    92 u32 key id (0 without a MAC)
 *    96 32B MAC field: BLAKE2b's 32-byte MAC, or GMAC's 16-byte tag, then its
 *       12-byte nonce, then 4 zero bytes; zeros without a MAC
 *   128 B x i32 token ids; then the stored payload.
 * The header CRC covers the header (both CRC fields read as zero) and lets a
 * scan trust the lengths without reading payloads; the record CRC extends it
 * over the stored payload and is checked on every read. Records of versions 1
 * (no MAC) and 2 (BLAKE2b only, over differently chosen bytes) are foreign to
 * this build: misses.
 *
 * MAC. CRCs catch accidents, not intent: anyone who can write a segment can
 * recompute them. So a record also carries a MAC under the directory's key
 * over the whole record as written, header and stored payload (namespace,
 * hash, parent, token ids, lengths, codec, flags, key id), with the two CRC
 * fields and the MAC field read as zero. The flags name one of two schemes:
 *   GMAC (KVT_DISK_SCHEME_GMAC), written wherever the CPU has AES-NI and
 *     PCLMUL: AES-256-GCM with those bytes as additional data and an empty
 *     message (libsodium's crypto_aead_aes256gcm), under an AES key derived
 *     from the directory's key (its keyed BLAKE2b of a domain-separation
 *     string, so no key serves two algorithms), with a fresh random 96-bit
 *     nonce per record kept beside the tag. A GCM nonce must never repeat
 *     under one key: random nonces make a repeat less likely than 2^-32 until
 *     2^32 records (4 PiB of 1 MiB blocks) have been written under one key
 *     file (NIST SP 800-38D's bound).
 *   BLAKE2b (KVT_DISK_SCHEME_BLAKE2B), the portable one where AES-GCM is
 *     unavailable: keyed BLAKE2b-256 (crypto_generichash) under the key itself.
 * A reader verifies each record with the scheme its flags name, so both can
 * share a directory (moved between machines); a record under a scheme this
 * machine cannot compute (GMAC without AES-NI, or a later build's) is a miss,
 * counted foreign, never served, kept by gc and reported as not checkable by
 * `cache verify`. KVT_DISK_MAC_SCHEME=blake2b in the environment makes the
 * process behave as a machine without AES-GCM (it writes BLAKE2b and cannot
 * check GMAC records): for tests and benchmarks only.
 * The key: the file `key`, KVT_DISK_KEY_BYTES
 * random bytes made at the first open (O_EXCL, 0600, fsync'd, under the lock)
 * and refused (-EACCES / KVT_EFORMAT, with the fix in the message) unless it is
 * a regular 0600 file of the directory's owner and of that exact size. A
 * record whose MAC does not verify is refused at read like a CRC failure:
 * counted corrupt, never served. The key id (a keyed hash of a constant,
 * revealing nothing of the key) tells a record signed under another key
 * (the key file was lost and a new one made: foreign, a miss) from a forged
 * one without reading payloads. The scan reads headers only, so the MAC is
 * checked on full reads (get, verify, gc), as each read of a batch completes,
 * while the others are still in flight. params.mac (default on;
 * --kv-disk-no-mac) turns it off: records are written without a MAC and any
 * CRC-valid record is served. With it on, records without a MAC (a downgrade
 * is refused), and records signed under another key (the key file was lost;
 * a new one is made), are foreign: misses, never wrong output.
 * Cost: one MAC pass over each record written and read, on one core, as
 * each read of a batch lands (while the others are still in flight).
 * bench_disk, 1 MiB blocks, O_DIRECT, 1 GiB cache, restores of 64 blocks, on
 * the shared 2-core dev VM (AES-NI, PCLMUL; Debian's libsodium 1.0.18: GMAC
 * 4-5.7 GB/s, BLAKE2b 0.5-0.7 GB/s on its non-AVX2 path; the disk's
 * sequential O_DIRECT read ranged 600-1180 MiB/s between runs, once 2146),
 * six interleaved runs of each, restore MiB/s (median) and its ratio to the
 * sequential read of the same run (median):
 *     MAC off          736-1061 (957)   0.84-1.39 (0.98)
 *     GMAC             673-958  (786)   0.68-1.36 (0.93; 0.36 in the 2146 run)
 *     BLAKE2b          389-717  (600)   0.41-0.86 (0.71)
 *     BLAKE2b, format 2 (before GMAC): 280-594 (378), 0.39-0.65 (0.48)
 * Against MAC off in the same round, restore keeps 0.71-1.27 with GMAC,
 * 0.39-0.93 with BLAKE2b (the noisier ratio on this VM). Writes:
 * 565-1124 MiB/s off, 386-813 GMAC, 307-453 BLAKE2b; full verify (buffered,
 * one read at a time) 237-557, 224-474, 140-299; the header-only open scan is
 * unchanged. Checking after the whole batch has landed instead of as each
 * read completes cut restore to 341-640 MiB/s (GMAC; 701-879 in flight) and
 * 210-338 (BLAKE2b; 210-471), three interleaved runs each.
 *
 * Open scan. Open reads record headers only (measured on a 2 GiB cache of
 * 1 MiB records, page cache dropped: 0.13 s for the header scan, 8 s for a full
 * read and CRC of every record), so a record
 * whose payload was torn is indexed and then refused by its CRC at the first
 * read: it is never served, is counted as corrupt, and leaves the index.
 * Records of another namespace or format version are skipped and counted as
 * foreign (a miss, not an error); a bad header is skipped by stepping to the
 * next 4 KiB boundary, so one corrupt record costs only itself.
 * A record's place depends on the header before it, so the scan reads ahead
 * by prediction, in batches of reads in flight together (io_uring; disk_scan.c):
 * records up to 32 KiB are read whole, 16 MiB of segment per batch (16 reads of
 * 1 MiB), and their headers parsed from memory; longer ones get one 8 KiB
 * header read each at the offsets the last record's length predicts, up to 64
 * in flight (2 after a missed prediction, doubling per batch that held). The
 * walk still parses one header at a time and is handed exactly the bytes a
 * pread at that offset returns (a missed prediction or a failed batched read
 * is read again on its own), so it finds the same records, skips the same
 * corrupt ones and cuts a torn tail at the same place as one read per header,
 * which params.scan_serial keeps for tests and benchmarks. bench_disk
 * --open-records, page cache dropped, O_DIRECT, the loaded dev VM: a full scan
 * of 220,000 4 KiB records 2.0 s batched against 31 s one read per header (9.3
 * and 143 s per million; 7.6-8.5 in later runs, near the disk's ~650 MB/s);
 * 64 KiB records 20-46 s per million against 131, bound here by the virtual
 * disk's random reads (about 30,000 a second). bench/RESULTS.md "Disk tier open" has the table.
 *
 * Checkpoint. Scanning headers costs one read per record (64 KiB records:
 * 4.9 s for 2 GiB), so the store also keeps its index in one file, `index`
 * (disk_ckpt.c has the layout, CRC32C over all of it): written at close and,
 * with params.index, every checkpoint_s seconds while records change (built
 * on the owner's thread from the index, written by the writer thread; temp
 * file, fsync, rename). It lists every indexed record (segment, offset,
 * length, key, parent, token ids) and, per segment, the bytes it covers and
 * the file's inode and mtime. Open loads it and scans only what it does not
 * cover: a segment it covers unchanged (same inode, mtime, at least as long)
 * is taken from it; any other segment, including the head a crash left
 * after the last periodic checkpoint, is scanned whole. A missing, truncated,
 * corrupt (CRC) checkpoint, or one taken under another namespace, block
 * size, payload size, MAC setting or key, is ignored with a warning and the
 * open scans everything, as without one. Nothing is lost either way: a
 * checkpoint only says where records are, and every read still checks CRC,
 * MAC, key, parent and tokens. gc and clear remove it. Stats:
 * checkpoint_used, checkpoint_records, open_scanned_bytes.
 *
 * Writes. kvt_disk_put copies the block into a bounded queue and returns; a
 * writer thread encodes (CRC, optional zstd), appends and indexes it. The
 * block is in the tier from the moment put returns 0: the index has its T2
 * presence at once and reads serve it from the queue until it is written, so
 * a block demoted here is never in no tier while it moves. When the queue is
 * full, put waits for the writer (back-pressure) up to put_wait_ms; only
 * then is the block dropped, counted and logged. The first write error (full
 * disk, read-only directory, EIO) disables writes with one warning; a queued
 * block that cannot be written leaves the index again; reads continue.
 *
 * Eviction. The segment files never total more than size_bytes plus one
 * segment. When the head segment is full the oldest segments are reclaimed
 * until the sealed ones fit in size_bytes; a record in a reclaimed segment
 * that was hit since it was last written is rewritten to the new head
 * (at most a quarter of a segment per reclaim), the rest leave the store. A
 * reclaimed file is unlinked at once but closed only when the last read that
 * holds it finishes.
 *
 * Prefix index. If params.index is set, the store keeps the index's T2
 * presence exact itself (handle = an opaque record slot): records found at
 * open are added during kvt_disk_open; queued blocks by kvt_disk_put itself;
 * records written, reclaimed or found
 * corrupt by the writer thread reach the index at the start of the next
 * kvt_disk_ call on the owner's thread (kvt_disk_poll does only that). Nobody
 * else may add or remove T2 presence in that index. A record whose key names a
 * different block in the index (a collision) is dropped from the store.
 * kvt_disk_remove is not persistent: after a restart the record may be found
 * again (it is still valid data) until its segment is reclaimed.
 *
 * Thread-safety: the owner serialises every kvt_disk_ call on one handle
 * (like the index it updates); the store's writer thread is internal. The
 * directory functions at the end (walk, compact, clear) are standalone. */
#ifndef KVT_TIER_DISK_H
#define KVT_TIER_DISK_H

#include <stddef.h>
#include <stdint.h>
#include <zstd.h>

#include "blockhash.h"
#include "prefix.h"
#include "tier.h"

/* Records start on, and are padded to, this boundary (O_DIRECT's unit). */
#define KVT_DISK_ALIGN 4096
/* On-disk format version of records and of the header file. */
#define KVT_DISK_FORMAT_VERSION 3
#define KVT_DISK_MAGIC 0x5232544Bu /* "KT2R" read as little-endian bytes */
/* Bytes of a record header before the token ids. */
#define KVT_DISK_HEADER_FIXED 128
/* The directory's MAC key, and the MAC field each record carries (see "MAC"). */
#define KVT_DISK_KEY_BYTES 32
#define KVT_DISK_MAC_BYTES 32
#define KVT_DISK_GMAC_TAG_BYTES 16   /* GMAC's tag, at the start of the MAC field */
#define KVT_DISK_GMAC_NONCE_BYTES 12 /* GMAC's nonce, right after the tag */
/* Record flags: bit 0 says the record carries a MAC; bits 1-3 name its scheme. */
#define KVT_DISK_FLAG_MAC 1u
#define KVT_DISK_FLAG_SCHEME_SHIFT 1
#define KVT_DISK_FLAG_SCHEME_MASK (7u << KVT_DISK_FLAG_SCHEME_SHIFT)
/* MAC schemes (a 3-bit field: values past these are a later build's). */
typedef enum { KVT_DISK_SCHEME_BLAKE2B = 0, KVT_DISK_SCHEME_GMAC = 1 } kvt_disk_mac_scheme;
/* Largest payload (before and after the codec) a record may declare: bounds
 * what a scan or the fuzzer will believe. */
#define KVT_DISK_PAYLOAD_MAX (256ull << 20)
#define KVT_DISK_SEGMENT_DEFAULT (64ull << 20)
#define KVT_DISK_QUEUE_DEFAULT 32
#define KVT_DISK_PUT_WAIT_MS_DEFAULT 5000
#define KVT_DISK_CHECKPOINT_S_DEFAULT 300.0
#define KVT_DISK_SPACE_RETRY_S_DEFAULT 5.0
#define KVT_DISK_SPACE_RETRY_S_MAX 3600.0
#define KVT_DISK_READ_RING_DEFAULT (8u << 20)

typedef enum { KVT_DISK_CODEC_RAW = 0, KVT_DISK_CODEC_ZSTD = 1, KVT_DISK_CODEC_COUNT } kvt_disk_codec;

typedef struct kvt_disk kvt_disk;

typedef struct {
    const char *dir;        /* cache directory; created if missing. Copied. */
    uint64_t size_bytes;    /* --kv-disk-size: budget for segment files, >= 2 segments */
    uint64_t segment_bytes; /* segment file size (KVT_DISK_ALIGN multiple, holds >= 1 record) */
    size_t payload_bytes;   /* bytes of one block's K/V; > 0, <= KVT_DISK_PAYLOAD_MAX */
    uint32_t block_tokens;  /* B, 1..KVT_BLOCK_TOKENS_MAX (and equal to the index's) */
    kvt_hash128 ns;         /* namespace: the root hash of the model/layout/tenant */
    kvt_prefix *index;      /* optional; borrowed, must outlive the store */
    kvt_disk_codec codec;   /* for new records; any codec is read */
    uint32_t queue_depth;   /* blocks waiting for the writer (>= 1); memory: depth x record */
    uint32_t put_wait_ms;   /* how long a put waits for queue room before dropping (0: never waits) */
    int use_io_uring;       /* try io_uring (falls back to pread/pwrite with a log line) */
    int use_o_direct;       /* try O_DIRECT (falls back to buffered I/O with a log line) */
    int mac;                /* sign records with the directory's key and serve only those that verify
                                 (default 1; see "MAC" above) */
    double checkpoint_s;    /* write an index checkpoint every this many seconds while records change
                                 (default KVT_DISK_CHECKPOINT_S_DEFAULT, or $KVT_DISK_CHECKPOINT_S; 0: only
                                 at close). Needs index; see "Checkpoint" above */
    int scan_serial;        /* open reads record headers one pread at a time, as before batched scans
                                 (default 0; for tests and benchmarks: see "Open scan" above) */
    double space_retry_s;   /* writes stopped by a full disk or quota (ENOSPC, EDQUOT): the writer checks
                                 the free space this often and resumes once a few records fit again
                                 (default KVT_DISK_SPACE_RETRY_S_DEFAULT; 0: they stay off until reopened).
                                 Reads and stored records are untouched meanwhile */
    size_t read_ring_bytes; /* the batched reads' buffer: a ring of slots this large in all, each reused once
                                 its records are checked (0: KVT_DISK_READ_RING_DEFAULT; at least two
                                 slots whatever the size; tests make it small to reuse slots) */
} kvt_disk_params;

typedef struct {
    uint64_t budget_bytes, bytes_used; /* bytes_used: all segment files, dead records included */
    uint64_t live_bytes;               /* bytes of indexed records */
    uint64_t records, segments;
    uint64_t hits, misses;   /* get / get_many outcomes per block */
    uint64_t corrupt;        /* records refused: bad header at open, bad CRC or length at read */
    uint64_t foreign;        /* records of another namespace or format version (skipped) */
    uint64_t puts, dup_puts; /* blocks written; puts of a block already stored */
    uint64_t dropped;        /* blocks not written: queue full, writes disabled, write error */
    uint64_t put_waits;      /* puts that found the queue full and waited for the writer */
    double put_wait_seconds; /* time those puts waited */
    uint64_t queue_hits;     /* blocks read from the write queue (not yet on disk) */
    uint64_t removes, evicted, reinserted, segments_reclaimed;
    uint64_t collisions; /* records refused by the index (key names another block) */
    uint64_t read_errors, write_errors;
    uint64_t bytes_written, bytes_read;
    double write_seconds, read_seconds; /* wall time inside write and read batches */
    uint64_t payload_in, stored_out;    /* payload bytes given to the codec and bytes it stored */
    double compression_ratio;           /* payload_in / stored_out (1 when nothing written) */
    uint32_t queued;                    /* blocks waiting for the writer now */
    int writes_disabled, io_uring, o_direct;
    double open_scan_seconds;             /* time kvt_disk_open spent rebuilding the index */
    uint64_t open_scanned_bytes;          /* segment bytes whose record headers that open scanned */
    uint64_t open_scan_reads;             /* batched reads that scan issued, and the bytes they read (0 with */
    uint64_t open_scan_read_bytes;        /* scan_serial: one read of 8 KiB per header) */
    int checkpoint_used;                  /* that open loaded an index checkpoint */
    uint64_t checkpoint_records;          /* records it took from the checkpoint */
    uint64_t checkpoints_written;         /* checkpoints written since (periodic and at close) */
    uint64_t space_pauses, space_resumes; /* times writes stopped for lack of space, and came back */
    int out_of_space;                     /* writes are stopped for lack of space now (writes_disabled is set too) */
    uint64_t read_slots_split;            /* read ring slots whose records two threads checked and copied */
} kvt_disk_stats;

/* One block of a kvt_disk_get_many batch (see tier.h). */
typedef kvt_tier_read kvt_disk_read;

/* The disk tier behind the tier interface (tier.h); the instance is a kvt_disk. */
extern const kvt_tier_ops kvt_disk_tier_ops;

/* size 16 GiB, segment KVT_DISK_SEGMENT_DEFAULT, B KVT_BLOCK_TOKENS_DEFAULT,
 * codec raw, queue KVT_DISK_QUEUE_DEFAULT, put wait KVT_DISK_PUT_WAIT_MS_DEFAULT,
 * io_uring, O_DIRECT and MAC on, the rest 0/NULL. The caller sets dir,
 * payload_bytes and ns. */
kvt_disk_params kvt_disk_default_params(void);

/* Opens (creating if needed) the cache directory, takes its lock, rebuilds
 * the record index from the segment headers (adding each record to
 * params.index) and starts the writer thread. Returns 0 and *out, or
 *   KVT_EARG      bad parameters (message says which),
 *   -EWOULDBLOCK  "cache dir X is in use by pid N",
 *   -EACCES       the directory belongs to another user or is writable by
 *                 group or others (message says which, and the fix),
 *   -ELOOP        the directory, or its lock file, is a symbolic link,
 *   -EINVAL       the lock file is not a regular file or has other links,
 *   -EACCES, KVT_EFORMAT  (with mac) the key file is not the owner's, not
 *                 0600, or not KVT_DISK_KEY_BYTES long,
 *   -errno        the directory cannot be created or read.
 * A directory that can be read but not written opens with writes disabled
 * (one warning). Close with kvt_disk_close. */
int kvt_disk_open(const kvt_disk_params *p, kvt_disk **out);

/* Waits for queued writes, syncs the head segment, stops the writer, removes
 * the store's T2 presence from the index (which must still be alive), and
 * releases the lock. The records stay on disk for the next open. */
void kvt_disk_close(kvt_disk *d);

/* Queues a copy of a block for writing: tokens (B ids) and payload
 * (payload_bytes) are copied before return; the caller keeps both. Returns
 *   0            queued: in the tier (index, get, contains) from now on,
 *   1            a block with this key is already stored or queued,
 *   KVT_ELIMIT   the queue stayed full for put_wait_ms: dropped and counted,
 *   KVT_EUNSUPPORTED  writes are disabled: dropped and counted,
 *   -EEXIST      the key names another block in the index (a collision).
 * Never does I/O itself; waits at most put_wait_ms for the writer. */
int kvt_disk_put(kvt_disk *d, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, const void *payload);

/* Reads block hash into out (payload_bytes) if it is stored or queued, its
 * CRC (and, with mac, its MAC) holds (stored), and its parent and tokens equal
 * parent and tokens. Returns 0 (hit) or KVT_ENOTFOUND (absent, corrupt,
 * unreadable, or another block under the same key). A corrupt or unreadable
 * record leaves the store. */
int kvt_disk_get(kvt_disk *d, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, void *out);

/* kvt_disk_get for a batch (one request's blocks): every read is issued
 * together, records adjacent on disk are read as one extent. Sets each
 * reqs[i].result; returns the number of hits. */
size_t kvt_disk_get_many(kvt_disk *d, kvt_disk_read *reqs, size_t n);

/* 1 if a block with this key is stored or queued for writing, else 0. */
int kvt_disk_contains(kvt_disk *d, kvt_hash128 hash);

/* Forgets a stored block (its bytes go with its segment). Returns 0 or
 * KVT_ENOTFOUND. Not persistent across restarts (see above). */
int kvt_disk_remove(kvt_disk *d, kvt_hash128 hash);


/* Waits until every block queued so far has been written or dropped, then
 * applies the writer's index updates. Returns 0, or the write error that
 * disabled writes (negative) if writes are disabled, with kvt_errmsg() set. */
int kvt_disk_flush(kvt_disk *d);

/* Holds (paused != 0) or resumes the writer thread: queued blocks stay in
 * the queue, still readable, until it resumes. For tests of the queue and of
 * back-pressure; kvt_disk_flush and kvt_disk_close resume it. */
void kvt_disk_pause_writer(kvt_disk *d, int paused);

/* Applies pending index updates from the writer thread (see above). */
void kvt_disk_poll(kvt_disk *d);

void kvt_disk_get_stats(kvt_disk *d, kvt_disk_stats *out);

/* ---- records, exposed for the CLI and the fuzzer ---------------------- */

/* A parsed record. Pointers point into the buffer given to the parser. */
typedef struct {
    uint32_t version, codec, block_tokens, header_bytes;
    uint64_t payload_bytes, stored_bytes;
    uint64_t record_bytes; /* header + stored payload, padded to KVT_DISK_ALIGN */
    kvt_hash128 ns, hash, parent;
    uint32_t header_crc, crc;
    uint32_t flags;                  /* KVT_DISK_FLAG_* */
    uint32_t mac_scheme;             /* KVT_DISK_SCHEME_* (from flags), with KVT_DISK_FLAG_MAC */
    uint32_t key_id;                 /* id of the key the MAC is under (0 without one) */
    uint8_t mac[KVT_DISK_MAC_BYTES]; /* as stored; meaningful with KVT_DISK_FLAG_MAC */
    const uint8_t *raw;              /* the record's first byte (the buffer given to the parser) */
    const int32_t *tokens;           /* B ids (unaligned access is fine: 4-byte aligned in a record) */
    const uint8_t *stored;           /* stored_bytes, only when the parse covered the payload */
} kvt_disk_record;

/* Parses the record at buf[0..len). With full == 0 only the header is needed
 * and checked (magic, version, lengths within limits, header CRC); with
 * full != 0 the stored payload must be in buf too and the record CRC must
 * hold. The MAC is not checked here (it needs the key; see
 * kvt_disk_record_check_mac). Returns 0, KVT_EFORMAT (corrupt, truncated or not a record), or
 * KVT_EUNSUPPORTED (a record of another format version; out->version set).
 * Never reads outside buf. Pure; thread-safe. */
int kvt_disk_record_parse(const void *buf, size_t len, int full, kvt_disk_record *out);

/* Decodes a fully parsed record's payload into out (cap bytes). Returns 0
 * when exactly payload_bytes came out, else KVT_EFORMAT (or KVT_ELIMIT if cap
 * is too small). Thread-safe. */
int kvt_disk_record_decode(const kvt_disk_record *r, void *out, size_t cap);

/* Checks a fully parsed record's MAC under the directory key `key`
 * (KVT_DISK_KEY_BYTES), with the scheme its flags name, in constant time.
 * Returns 0 if the record carries a MAC and it matches, KVT_EFORMAT if it
 * carries none or it does not match, KVT_EUNSUPPORTED if its scheme cannot be
 * computed here (see "MAC"), KVT_EARG if the parse did not cover the payload.
 * Reads only the buffer the record was parsed from (and never writes it: it
 * works on a copy). Thread-safe. */
int kvt_disk_record_check_mac(const kvt_disk_record *r, const uint8_t key[KVT_DISK_KEY_BYTES]);

/* The scheme this process signs new records with: KVT_DISK_SCHEME_GMAC where
 * libsodium finds AES-NI and PCLMUL and KVT_DISK_MAC_SCHEME is not "blake2b",
 * else KVT_DISK_SCHEME_BLAKE2B. Thread-safe. */
kvt_disk_mac_scheme kvt_disk_mac_scheme_default(void);

/* ---- records for other tiers: the writing side ------------------------ */

/* The record above as a codec of its own, for tiers that keep records
 * somewhere other than a segment file: the remote tier (tier_remote.h) stores
 * one record per Redis value. The format, its version and its MAC stay
 * defined in one place, disk_record.c, so a record means the same thing in
 * every tier. Every function here is pure (reads and writes only its
 * arguments) unless said otherwise. */

/* Bytes of a record header for B-token blocks (token ids included). */
#define KVT_DISK_RECORD_HEADER_BYTES(B) ((size_t)KVT_DISK_HEADER_FIXED + 4u * (size_t)(B))

/* The id a record signed under key carries (a keyed hash of a constant: it
 * says nothing about the key, and tells a record signed under another key
 * from a forged one). */
uint32_t kvt_disk_record_key_id(const uint8_t key[KVT_DISK_KEY_BYTES]);

/* Completes a record in rec: the caller has put the B token ids at
 * rec + KVT_DISK_HEADER_FIXED and the stored payload (stored_bytes, after the
 * codec) at rec + KVT_DISK_RECORD_HEADER_BYTES(B); this writes every other
 * header field, the MAC under key (key_id from kvt_disk_record_key_id; key
 * NULL: no MAC) and both CRCs, then zeroes the padding up to the next
 * KVT_DISK_ALIGN boundary, which rec must have room for. Returns the padded
 * length; the record proper is header + stored_bytes long, and
 * kvt_disk_record_parse accepts it without the padding. */
uint64_t kvt_disk_record_encode(uint8_t *rec, uint32_t B, kvt_disk_codec codec, uint64_t payload_bytes,
                                uint64_t stored_bytes, kvt_hash128 ns, kvt_hash128 hash, kvt_hash128 parent,
                                const uint8_t *key, uint32_t key_id);

/* ---- the same, with a key prepared once (the remote tier's hot path) ---- */

/* A MAC key with its id and derived AES key computed once, for many records.
 * Immutable after creation: one key may serve several threads at once. */
typedef struct kvt_disk_record_key kvt_disk_record_key;

/* Prepares key (KVT_DISK_KEY_BYTES). Free with kvt_disk_record_key_free,
 * which wipes it. */
kvt_disk_record_key *kvt_disk_record_key_new(const uint8_t key[KVT_DISK_KEY_BYTES]);
void kvt_disk_record_key_free(kvt_disk_record_key *k);

/* kvt_disk_record_encode under a prepared key (NULL: no MAC). */
uint64_t kvt_disk_record_sign(uint8_t *rec, uint32_t B, kvt_disk_codec codec, uint64_t payload_bytes,
                              uint64_t stored_bytes, kvt_hash128 ns, kvt_hash128 hash, kvt_hash128 parent,
                              const kvt_disk_record_key *k);

/* kvt_disk_record_check_mac under a prepared key, without the copy: buf is
 * the record's bytes (r->raw), writable; it is briefly modified during the
 * check and restored before return, so no other thread may read it meanwhile.
 * Same results as kvt_disk_record_check_mac. */
int kvt_disk_record_verify_in_place(const kvt_disk_record *r, const kvt_disk_record_key *k, uint8_t *buf);

/* kvt_disk_record_decode with a zstd context reused across calls (dc may be
 * NULL: a context per call). */
int kvt_disk_record_decode_with(ZSTD_DCtx *dc, const kvt_disk_record *r, void *out, size_t cap);

/* ---- side files: state of the store's owner kept beside the records --- */

/* The store's owner may keep small files of its own in the directory (the
 * server's reply journal), under names beginning with KVT_DISK_SIDE_PREFIX:
 * the store counts them as its own (no foreign-file warning), never reads
 * them, and clear and gc leave them alone. They follow the directory's rules:
 * opened relative to its fd, never through a link, regular files only,
 * created 0600, written only when they have no other hard link. Both calls
 * use only the directory's fd, fixed while the store is open, so any thread
 * may make them, concurrently with the owner's kvt_disk_ calls. */
#define KVT_DISK_SIDE_PREFIX "side-"
/* The directory's path (for messages). */
const char *kvt_disk_path(const kvt_disk *d);
/* Opens side file name (open(2) flags; O_CREAT makes it 0600). Returns the fd
 * or a negative error with kvt_errmsg() naming the file: -ENOENT, -ELOOP (a
 * symbolic link, never followed), -EINVAL (not a regular file, or linked
 * elsewhere for writing; also a name without the prefix or with a '/'). */
int kvt_disk_side_open(kvt_disk *d, const char *name, int flags);
/* Replaces side file name by buf[0..n) atomically: "<name>.tmp" created
 * afresh (O_EXCL), written, fsync'd, renamed over name, then the directory
 * fsync'd. A link under name is replaced as a name: its target is never
 * opened. Returns 0 or a negative error with kvt_errmsg(). */
int kvt_disk_side_replace(kvt_disk *d, const char *name, const void *buf, size_t n);

/* Reads side file name of dir for a reader (kvtier cache verify: no lock, any
 * owner, beside a live server): never through a link, a regular file only,
 * at most max bytes. Returns 0 with *buf (malloc'd) and *n, or a negative
 * error with kvt_errmsg() naming the file: -ENOENT, -ELOOP, -EINVAL (not a
 * regular file or not a side file's name), -EFBIG (longer than max). */
int kvt_disk_side_read(const char *dir, const char *name, size_t max, uint8_t **buf, size_t *n);
/* The whole file at fd (from offset 0; what is there if it is shorter than
 * fstat said) into a malloc'd *buf of *n bytes. Returns 0, -EFBIG (longer
 * than max: nothing read) or -errno of fstat; sets no message. */
int kvt_disk_fd_read_all(int fd, size_t max, uint8_t **buf, size_t *n);

/* Side files sign their records with the directory's key, as the store signs
 * its own (see "MAC"): the scheme this process signs with, one
 * KVT_DISK_MAC_BYTES field per message, the MAC taken over the message as one
 * buffer. Its owner binds the message to its own file (a context of its own
 * in the message), so a MAC made for one file or record never passes for
 * another's. */

/* A prepared copy of the open store's key (free with
 * kvt_disk_record_key_free), or NULL when it has none: MAC off, or no key
 * file could be read or made (then nothing is written either). */
kvt_disk_record_key *kvt_disk_side_key(const kvt_disk *d);
/* 1 when the store runs with its MAC off (--kv-disk-no-mac: records carry
 * their CRCs alone, the operator trusting the directory), else 0. */
int kvt_disk_mac_off(const kvt_disk *d);
/* Reads dir's key file for a reader, as kvt_disk_walk's verify does (its
 * owner's, 0600, whole). Returns 0 and *k (free with
 * kvt_disk_record_key_free), KVT_ENOTFOUND (no key file), or the refusal as
 * kvt_disk_open words it. */
int kvt_disk_key_read(const char *dir, kvt_disk_record_key **k);
/* The scheme k signs with (KVT_DISK_SCHEME_*) and k's id (as records carry it). */
uint32_t kvt_disk_key_scheme(const kvt_disk_record_key *k);
uint32_t kvt_disk_key_ident(const kvt_disk_record_key *k);
/* The MAC field of msg[0..n) under k, with kvt_disk_key_scheme(k) (GMAC: a
 * fresh random nonce, kept in the field after the tag). Thread-safe. */
void kvt_disk_mac(const kvt_disk_record_key *k, const uint8_t *msg, size_t n, uint8_t field[KVT_DISK_MAC_BYTES]);
/* Checks field, made under scheme, against msg[0..n) under k, in constant
 * time. Returns 0, KVT_EFORMAT (a mismatch: altered, or signed under another
 * key) or KVT_EUNSUPPORTED (a scheme not computed here). Thread-safe. */
int kvt_disk_mac_check(const kvt_disk_record_key *k, uint32_t scheme, const uint8_t *msg, size_t n,
                       const uint8_t field[KVT_DISK_MAC_BYTES]);

/* ---- directory maintenance (kvtier cache) ----------------------------- */

/* kvt_disk_walk_info.mac */
enum {
    KVT_DISK_MAC_NONE = 0,      /* the record carries no MAC (written with mac off) */
    KVT_DISK_MAC_UNCHECKED = 1, /* it carries one, not checked: a header walk, no key file, signed under
                                   another key than the key file's, or under a scheme not computed here */
    KVT_DISK_MAC_OK = 2,        /* it carries one and it verified */
};

/* What kvt_disk_walk reports for each record slot it finds. */
typedef struct {
    const char *segment; /* file name, valid during the callback */
    uint64_t offset;     /* within the segment */
    uint64_t bytes;      /* record bytes, or the bytes skipped for a bad one */
    int status;          /* 0 valid, KVT_EFORMAT corrupt, KVT_EUNSUPPORTED other version */
    kvt_disk_record rec; /* header fields when status is 0 (pointers invalid) */
    int mac;             /* KVT_DISK_MAC_*, when status is 0 */
    int keyed;           /* verify: the directory has a key file, so a record without a MAC (MAC_NONE) is
                             unauthenticated: the store, which wants a MAC under that key, never serves it */
    const char *why;     /* what is wrong when status is nonzero (valid during the callback), else NULL */
} kvt_disk_walk_info;

/* Walks every segment of dir in FIFO order without taking the lock (files
 * may change under a live server: a vanished segment is skipped, and so is
 * a link or a FIFO under a segment's name, with a warning). Damage is a bad
 * stretch (status KVT_EFORMAT): a record that does not parse, a record or
 * header cut by the end of the file, and a file shorter than the index
 * checkpoint recorded it (the stretch from its end to the recorded one). With
 * verify, every record's payload is read and its CRC checked (and decoded),
 * and its MAC under the directory's key file if both exist (a mismatch is
 * status KVT_EFORMAT); otherwise headers only. Calls fn per record; a nonzero
 * return stops the walk and is returned. Returns 0, -errno if dir cannot be
 * read, or (verify) the key file's refusal, as kvt_disk_open words it. */
int kvt_disk_walk(const char *dir, int verify, int (*fn)(void *ctx, const kvt_disk_walk_info *w), void *ctx);
/* The bytes of dir's segment files (regular files only), from their sizes
 * alone: the total a walk's progress line counts up to, and *files, how many
 * there are (NULL: not wanted; an empty one counts too, though a walk finds
 * no record in it). Returns 0 or -errno. */
int kvt_disk_segment_bytes(const char *dir, uint64_t *bytes, uint64_t *files);

/* Reads the directory's header file: 0 and *version, *ns; KVT_ENOTFOUND if
 * there is none; KVT_EFORMAT if it is malformed. */
int kvt_disk_read_header(const char *dir, uint32_t *version, kvt_hash128 *ns);

typedef struct {
    uint64_t kept, dropped_corrupt, dropped_foreign, dropped_dup;
    uint64_t bytes_before, bytes_after;
} kvt_disk_gc_report;

/* Counters summed over every session that closed the directory (kept in its
 * "stats" file, rewritten atomically by kvt_disk_close). lookup_* count the
 * full prompt blocks the cache policy asked for and those this tier served
 * (kvt_disk_note_lookup); reads/read_misses are kvt_disk_get outcomes. */
typedef struct {
    uint64_t sessions, lookup_blocks, lookup_hits, reads, read_misses, records_written, writes_dropped, corrupt,
        bytes_read, bytes_written, evicted;
} kvt_disk_lifetime;

/* Reads dir's lifetime counters. Returns 0, KVT_ENOTFOUND (none yet) or -errno. */
int kvt_disk_read_lifetime(const char *dir, kvt_disk_lifetime *out);

/* Records that a request looked up `blocks` full prompt blocks and `hits` of
 * them were served by this tier (for the hit rate in the lifetime counters). */
void kvt_disk_note_lookup(kvt_disk *d, uint64_t blocks, uint64_t hits);

/* Takes the lock (failing like kvt_disk_open if held) and rewrites every
 * segment that holds corrupt records (CRC, or MAC when the key file exists;
 * then records signed under another key go too, as foreign, while those under
 * a MAC scheme not computed here stay, unchecked), records of another version, records of
 * a namespace other than *keep_ns (NULL: keep every namespace) or duplicate
 * keys, keeping the rest; each rewrite is a temp file, fsync, rename.
 * Segments left empty are removed; a link or FIFO under a segment's name is
 * left alone. Refuses a directory as kvt_disk_open does. Returns 0 or a
 * negative error. */
int kvt_disk_compact(const char *dir, const kvt_hash128 *keep_ns, kvt_disk_gc_report *rep);

/* Takes the lock and removes every segment file (and temp file) in dir, and
 * any link under such a name (the link, never its target); the header and
 * lock files stay. Refuses a directory as kvt_disk_open does. *removed gets the bytes freed (may be NULL). */
int kvt_disk_clear(const char *dir, uint64_t *removed);

#endif
