// SPDX-License-Identifier: MIT
/* The disk tier's shared internals, private to src/cache: the record header's
 * field offsets and MAC key (disk_record.c), and the cache directory's files
 * (disk_dir.c), as the store (tier_disk.c) and the maintenance walks
 * (disk_maint.c) use them. The contract of everything here is tier_disk.h's:
 * the record layout, the directory rules (every file opened relative to the
 * directory's fd, never through a symlink, only regular files, temporaries
 * O_EXCL) and what a MAC binds. Nothing here is for other tiers: they use
 * disk_record.h.
 *
 * Errors: functions returning int give 0 (or a count/fd >= 0) or a negative
 * error whose message (kvt_errmsg) says why, unless said otherwise.
 * Thread-safety: all functions are reentrant; a mac_key is read-only once
 * prepared. */
#ifndef KVT_DISK_INTERNAL_H
#define KVT_DISK_INTERNAL_H

#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <sodium.h>
#include <zstd.h>

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
    int gmac;                          /* GMAC is computed here: gcm is set */
    crypto_aead_aes256gcm_state gcm;   /* the derived AES-256 key, expanded once */
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

/* The header file: written atomically; read gives KVT_ENOTFOUND or KVT_EFORMAT. */
int kvt_disk_write_header(int dfd, const char *dir, kvt_hash128 ns);
int kvt_disk_read_header_at(int dfd, const char *dir, uint32_t *version, kvt_hash128 *ns);

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
    uint64_t batches;   /* batches (windows) of reads issued together */
    uint64_t reads;     /* positioned reads, including fallbacks */
    uint64_t fallbacks; /* offsets read on their own (a missed prediction, a failed batched read) */
    uint64_t bytes;     /* bytes those reads returned */
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

#endif
