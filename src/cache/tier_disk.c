/* T2 disk store: the record format and its parser, the cache directory (lock,
 * header, segment files), the open-time header scan, the writer thread with
 * its bounded queue and segment reclaim, batched verified reads, the
 * and the maintenance walks behind `kvtier cache`. */
#include "tier_disk.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <sodium.h>
#include <zstd.h>

#include "common.h"
#include "crc32c.h"
#include "disk_record.h"
#include "disk_io.h"
#include "hmap128.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the disk record format is little-endian; add byte swapping for this target"
#endif

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

#define DISK_DEFAULT_SIZE (16ull << 30)
#define LOCK_NAME "lock"
#define HEADER_NAME "header"
#define HEADER_TMP_NAME "header.tmp"
#define PROBE_NAME ".odirect-probe"
#define STATS_NAME "stats"          /* lifetime counters, text, rewritten atomically at close */
#define STATS_TMP_NAME "stats.tmp"
#define KEY_NAME "key"              /* the directory's MAC key: KVT_DISK_KEY_BYTES random bytes, 0600 */
#define KEY_TMP_NAME "key.tmp"
#define SEG_PREFIX "seg-"
#define SEG_SUFFIX ".kvt"
#define TMP_SUFFIX ".tmp"
#define SEG_NAME_MAX 64
#define TMP_NAME_MAX (SEG_NAME_MAX + sizeof TMP_SUFFIX)
/* The directory and its files are ours alone (see dir_open). */
#define DIR_MODE 0700
#define FILE_MODE 0600
#define HEADER_TEXT_MAX 256
#define HEADER_TITLE "kvtier-disk-cache"
/* Header reads during a scan: enough for the largest header (B = KVT_BLOCK_TOKENS_MAX). */
#define SCAN_READ_BYTES (2 * KVT_DISK_ALIGN)
/* Adjacent records are read as one extent up to this size: big enough to cut
 * per-read overhead, small enough that several reads stay in flight while the
 * CRC and copy of finished ones run. */
#define COALESCE_MAX (1u << 20)
/* Reads kept in flight by one batch. */
#define READ_DEPTH 64
/* Records rewritten to the head per reclaim, as a fraction of a segment. */
#define REINSERT_DIVISOR 4
/* zstd level for new records: KV pages compress little, so favour speed. */
#define ZSTD_LEVEL 1
#define RECS_MIN_CAP 64
/* The index handle of a block that is still in the write queue. */
#define QUEUED_HANDLE UINT64_MAX
/* Dropped writes are logged: the first few, then one in this many. */
#define DROP_LOG_FIRST 5
#define DROP_LOG_EVERY 1000

static_assert(RH_FLAGS == RH_CRC + 4 && RH_MAC == RH_KEY_ID + 4, "record header layout");
static_assert(RH_TOKENS == RH_MAC + KVT_DISK_MAC_BYTES, "record header layout");
static_assert(KVT_DISK_MAC_BYTES >= crypto_generichash_BYTES_MIN && KVT_DISK_MAC_BYTES <= crypto_generichash_BYTES_MAX,
              "MAC length BLAKE2b can produce");
static_assert(KVT_DISK_KEY_BYTES >= crypto_generichash_KEYBYTES_MIN && KVT_DISK_KEY_BYTES <= crypto_generichash_KEYBYTES_MAX,
              "key length BLAKE2b accepts");
static_assert(KVT_DISK_GMAC_TAG_BYTES == crypto_aead_aes256gcm_ABYTES &&
                  KVT_DISK_GMAC_NONCE_BYTES == crypto_aead_aes256gcm_NPUBBYTES &&
                  KVT_DISK_GMAC_TAG_BYTES + KVT_DISK_GMAC_NONCE_BYTES <= KVT_DISK_MAC_BYTES,
              "GMAC's tag and nonce fit the MAC field");
static_assert(crypto_aead_aes256gcm_KEYBYTES >= crypto_generichash_BYTES_MIN &&
                  crypto_aead_aes256gcm_KEYBYTES <= crypto_generichash_BYTES_MAX,
              "BLAKE2b can derive an AES-256 key");
static_assert(KVT_DISK_HEADER_FIXED + 4 * KVT_BLOCK_TOKENS_MAX <= SCAN_READ_BYTES, "scan reads a whole header");

static uint64_t align_up(uint64_t n) { return (n + KVT_DISK_ALIGN - 1) / KVT_DISK_ALIGN * KVT_DISK_ALIGN; }

static uint32_t rd32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static uint64_t rd64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static kvt_hash128 rdh(const uint8_t *p) {
    kvt_hash128 h;
    memcpy(&h.lo, p, 8);
    memcpy(&h.hi, p + 8, 8);
    return h;
}
static void wr32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void wr16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static void wr64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static void wrh(uint8_t *p, kvt_hash128 h) {
    memcpy(p, &h.lo, 8);
    memcpy(p + 8, &h.hi, 8);
}

/* CRC of a header with its two CRC fields taken as zero. */
static uint32_t header_crc(const uint8_t *h, uint32_t header_bytes) {
    static const uint8_t zeros[RH_CRC_FIELDS_BYTES];
    uint32_t c = kvt_crc32c(0, h, RH_HEADER_CRC);
    c = kvt_crc32c(c, zeros, sizeof zeros);
    return kvt_crc32c(c, h + RH_FLAGS, header_bytes - RH_FLAGS);
}

/* KVT_DISK_MAC_SCHEME=blake2b: behave as a CPU without AES-GCM (tests, benchmarks). */
#define MAC_SCHEME_ENV "KVT_DISK_MAC_SCHEME"
#define MAC_SCHEME_PORTABLE "blake2b"

/* 1 if this process computes GMAC: libsodium found AES-NI and PCLMUL (it
 * must be initialised to look) and the environment does not say otherwise. */
static int gmac_usable(void) {
    if (sodium_init() < 0) return 0;
    const char *s = getenv(MAC_SCHEME_ENV);
    if (s && !strcmp(s, MAC_SCHEME_PORTABLE)) return 0;
    return crypto_aead_aes256gcm_is_available();
}

kvt_disk_mac_scheme kvt_disk_mac_scheme_default(void) {
    return gmac_usable() ? KVT_DISK_SCHEME_GMAC : KVT_DISK_SCHEME_BLAKE2B;
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

#define KEY_ID_CONTEXT "kvtier disk key id"
#define GMAC_KEY_CONTEXT "kvtier disk aes-256-gcm key"

/* Fills in k's id and, where GMAC is computed, its AES key: the directory
 * key's BLAKE2b of a domain-separation string, so the raw key never serves
 * two algorithms. k->bytes is set. */
static void key_prepare(mac_key *k) {
    uint8_t h[crypto_generichash_BYTES_MIN];
    crypto_generichash(h, sizeof h, (const uint8_t *)KEY_ID_CONTEXT, sizeof KEY_ID_CONTEXT - 1, k->bytes,
                       KVT_DISK_KEY_BYTES);
    memcpy(&k->id, h, sizeof k->id);
    k->gmac = gmac_usable();
    if (k->gmac) {
        uint8_t aes[crypto_aead_aes256gcm_KEYBYTES];
        crypto_generichash(aes, sizeof aes, (const uint8_t *)GMAC_KEY_CONTEXT, sizeof GMAC_KEY_CONTEXT - 1, k->bytes,
                           KVT_DISK_KEY_BYTES);
        crypto_aead_aes256gcm_beforenm(&k->gcm, aes);
        sodium_memzero(aes, sizeof aes);
    }
}

/* 1 if a record's MAC under scheme can be computed with k here. */
static int scheme_usable(const mac_key *k, uint32_t scheme) {
    return scheme == KVT_DISK_SCHEME_BLAKE2B || (scheme == KVT_DISK_SCHEME_GMAC && k->gmac);
}

/* The MAC field of the record rec[0..len) (header and stored payload) under
 * scheme (usable with k): the MAC covers every byte, with the two CRC fields
 * and the MAC field read as zero, so magic, version, codec, lengths,
 * namespace, hash, parent, flags, key id and token ids are all bound. A
 * record can then only be made by whoever holds the key, and a payload moved
 * under another key, parent or token list no longer matches. GMAC takes its
 * additional data as one buffer, so those fields are zeroed in rec while it
 * runs and then restored: rec is unchanged on return, but must not be read by
 * another thread meanwhile (it never is: see the callers). nonce is GMAC's;
 * it goes into the field after the tag. out may point into rec. */
static void record_mac(const mac_key *k, uint32_t scheme, uint8_t *rec, uint64_t len,
                       const uint8_t nonce[KVT_DISK_GMAC_NONCE_BYTES], uint8_t out[KVT_DISK_MAC_BYTES]) {
    static const uint8_t zeros[KVT_DISK_MAC_BYTES];
    uint8_t mac[KVT_DISK_MAC_BYTES] = {0};
    if (scheme == KVT_DISK_SCHEME_BLAKE2B) {
        crypto_generichash_state st;
        crypto_generichash_init(&st, k->bytes, KVT_DISK_KEY_BYTES, KVT_DISK_MAC_BYTES);
        crypto_generichash_update(&st, rec, RH_HEADER_CRC);
        crypto_generichash_update(&st, zeros, RH_CRC_FIELDS_BYTES);
        crypto_generichash_update(&st, rec + RH_FLAGS, RH_MAC - RH_FLAGS);
        crypto_generichash_update(&st, zeros, KVT_DISK_MAC_BYTES);
        crypto_generichash_update(&st, rec + RH_TOKENS, len - RH_TOKENS);
        crypto_generichash_final(&st, mac, KVT_DISK_MAC_BYTES);
    } else {
        assert(scheme == KVT_DISK_SCHEME_GMAC && k->gmac);
        uint8_t crcs[RH_CRC_FIELDS_BYTES], field[KVT_DISK_MAC_BYTES], empty = 0;
        memcpy(crcs, rec + RH_HEADER_CRC, sizeof crcs);
        memcpy(field, rec + RH_MAC, sizeof field);
        memset(rec + RH_HEADER_CRC, 0, sizeof crcs);
        memset(rec + RH_MAC, 0, sizeof field);
        crypto_aead_aes256gcm_encrypt_detached_afternm(&empty, mac, NULL, &empty, 0, rec, len, NULL, nonce, &k->gcm);
        memcpy(rec + RH_HEADER_CRC, crcs, sizeof crcs);
        memcpy(rec + RH_MAC, field, sizeof field);
        memcpy(mac + KVT_DISK_GMAC_TAG_BYTES, nonce, KVT_DISK_GMAC_NONCE_BYTES);
    }
    memcpy(out, mac, KVT_DISK_MAC_BYTES);
}

/* Checks a fully parsed record's MAC under k, in constant time. buf is the
 * record's bytes (r->raw), writable for record_mac. Returns 0, KVT_EFORMAT
 * (no MAC, or a mismatch) or KVT_EUNSUPPORTED (a scheme not computed here). */
static int record_verify(const kvt_disk_record *r, const mac_key *k, uint8_t *buf) {
    assert(buf == r->raw && r->stored == buf + r->header_bytes);
    if (!(r->flags & KVT_DISK_FLAG_MAC)) return kvt_fail(KVT_EFORMAT, "record carries no MAC");
    if (!scheme_usable(k, r->mac_scheme))
        return kvt_fail(KVT_EUNSUPPORTED, "record MAC scheme %u cannot be computed here", r->mac_scheme);
    uint8_t mac[KVT_DISK_MAC_BYTES];
    record_mac(k, r->mac_scheme, buf, r->header_bytes + r->stored_bytes, r->mac + KVT_DISK_GMAC_TAG_BYTES, mac);
    if (sodium_memcmp(mac, r->mac, KVT_DISK_MAC_BYTES))
        return kvt_fail(KVT_EFORMAT, "record MAC mismatch: altered, or written under another key");
    return 0;
}

/* 1 if k can check r's MAC: it carries one, under k's id and a scheme usable here. */
static int mac_checkable(const mac_key *k, const kvt_disk_record *r) {
    return k && (r->flags & KVT_DISK_FLAG_MAC) && r->key_id == k->id && scheme_usable(k, r->mac_scheme);
}

/* ---- record format ----------------------------------------------------- */

int kvt_disk_record_parse(const void *buf, size_t len, int full, kvt_disk_record *out) {
    const uint8_t *b = buf;
    memset(out, 0, sizeof *out);
    if (len < KVT_DISK_HEADER_FIXED || rd32(b + RH_MAGIC) != KVT_DISK_MAGIC)
        return kvt_fail(KVT_EFORMAT, "not a disk record");
    uint16_t version;
    memcpy(&version, b + RH_VERSION, 2);
    out->version = version;
    if (version != KVT_DISK_FORMAT_VERSION)
        return kvt_fail(KVT_EUNSUPPORTED, "record format version %u (this build reads %d)", version,
                        KVT_DISK_FORMAT_VERSION);
    uint16_t codec;
    memcpy(&codec, b + RH_CODEC, 2);
    out->codec = codec;
    out->header_bytes = rd32(b + RH_HEADER_BYTES);
    out->block_tokens = rd32(b + RH_BLOCK_TOKENS);
    out->payload_bytes = rd64(b + RH_PAYLOAD_BYTES);
    out->stored_bytes = rd64(b + RH_STORED_BYTES);
    if (out->block_tokens == 0 || out->block_tokens > KVT_BLOCK_TOKENS_MAX ||
        out->header_bytes != KVT_DISK_HEADER_FIXED + 4 * out->block_tokens)
        return kvt_fail(KVT_EFORMAT, "record header: bad block size %u / header bytes %u", out->block_tokens,
                        out->header_bytes);
    if (codec >= KVT_DISK_CODEC_COUNT) return kvt_fail(KVT_EFORMAT, "record header: unknown codec %u", codec);
    if (out->payload_bytes == 0 || out->payload_bytes > KVT_DISK_PAYLOAD_MAX || out->stored_bytes == 0 ||
        out->stored_bytes > KVT_DISK_PAYLOAD_MAX ||
        (codec == KVT_DISK_CODEC_RAW && out->stored_bytes != out->payload_bytes))
        return kvt_fail(KVT_EFORMAT, "record header: bad lengths %" PRIu64 "/%" PRIu64, out->payload_bytes,
                        out->stored_bytes);
    if (len < out->header_bytes) return kvt_fail(KVT_EFORMAT, "record header truncated");
    out->header_crc = rd32(b + RH_HEADER_CRC);
    out->crc = rd32(b + RH_CRC);
    uint32_t hc = header_crc(b, out->header_bytes);
    if (hc != out->header_crc) return kvt_fail(KVT_EFORMAT, "record header CRC mismatch");
    out->flags = rd32(b + RH_FLAGS);
    out->key_id = rd32(b + RH_KEY_ID);
    out->mac_scheme = (out->flags & KVT_DISK_FLAG_SCHEME_MASK) >> KVT_DISK_FLAG_SCHEME_SHIFT;
    if ((out->flags & ~(KVT_DISK_FLAG_MAC | KVT_DISK_FLAG_SCHEME_MASK)) ||
        (!(out->flags & KVT_DISK_FLAG_MAC) && (out->key_id || out->mac_scheme)))
        return kvt_fail(KVT_EFORMAT, "record header: unknown flags %08x, or a key id or scheme without a MAC",
                        out->flags);
    memcpy(out->mac, b + RH_MAC, KVT_DISK_MAC_BYTES);
    out->raw = b;
    out->record_bytes = align_up(out->header_bytes + out->stored_bytes);
    out->ns = rdh(b + RH_NS);
    out->hash = rdh(b + RH_HASH);
    out->parent = rdh(b + RH_PARENT);
    out->tokens = (const int32_t *)(const void *)(b + RH_TOKENS);
    if (!full) return 0;
    if (len < out->header_bytes + out->stored_bytes) return kvt_fail(KVT_EFORMAT, "record payload truncated");
    out->stored = b + out->header_bytes;
    if (kvt_crc32c(hc, out->stored, out->stored_bytes) != out->crc) {
        out->stored = NULL;
        return kvt_fail(KVT_EFORMAT, "record CRC mismatch");
    }
    return 0;
}

static int decode_with(ZSTD_DCtx *dc, const kvt_disk_record *r, void *out, size_t cap) {
    if (!r->stored) return kvt_fail(KVT_EARG, "record payload not parsed");
    if (cap < r->payload_bytes) return kvt_fail(KVT_ELIMIT, "payload of %" PRIu64 " bytes > %zu", r->payload_bytes, cap);
    if (r->codec == KVT_DISK_CODEC_RAW) {
        memcpy(out, r->stored, r->payload_bytes);
        return 0;
    }
    size_t n = dc ? ZSTD_decompressDCtx(dc, out, r->payload_bytes, r->stored, r->stored_bytes)
                  : ZSTD_decompress(out, r->payload_bytes, r->stored, r->stored_bytes);
    if (ZSTD_isError(n) || n != r->payload_bytes) return kvt_fail(KVT_EFORMAT, "zstd payload does not decode");
    return 0;
}

int kvt_disk_record_decode(const kvt_disk_record *r, void *out, size_t cap) { return decode_with(NULL, r, out, cap); }

int kvt_disk_record_check_mac(const kvt_disk_record *r, const uint8_t key[KVT_DISK_KEY_BYTES]) {
    if (!r->raw || !r->stored) return kvt_fail(KVT_EARG, "record payload not parsed");
    if (!(r->flags & KVT_DISK_FLAG_MAC)) return kvt_fail(KVT_EFORMAT, "record carries no MAC");
    mac_key k;
    memcpy(k.bytes, key, KVT_DISK_KEY_BYTES);
    key_prepare(&k);
    /* a copy: GMAC works in place, and the caller's buffer may be read-only */
    size_t len = r->header_bytes + r->stored_bytes;
    uint8_t *copy = kvt_xmalloc(len);
    memcpy(copy, r->raw, len);
    kvt_disk_record c = *r;
    c.raw = copy;
    c.stored = copy + r->header_bytes;
    c.tokens = (const int32_t *)(const void *)(copy + RH_TOKENS);
    int rc = record_verify(&c, &k, copy);
    free(copy);
    sodium_memzero(&k, sizeof k);
    return rc;
}

/* Writes a record header into h (header_bytes) for a stored payload at
 * h + header_bytes, its MAC under key (none when key is NULL; GMAC where key
 * computes it, with a fresh random nonce, else BLAKE2b), and both CRCs.
 * Returns the padded record length; zeroes the padding. */
static uint64_t record_encode(uint8_t *h, uint32_t B, kvt_disk_codec codec, uint64_t payload_bytes,
                              uint64_t stored_bytes, kvt_hash128 ns, kvt_hash128 hash, kvt_hash128 parent,
                              const mac_key *key) {
    uint32_t header_bytes = KVT_DISK_HEADER_FIXED + 4 * B;
    wr32(h + RH_MAGIC, KVT_DISK_MAGIC);
    wr16(h + RH_VERSION, KVT_DISK_FORMAT_VERSION);
    wr16(h + RH_CODEC, (uint16_t)codec);
    wr32(h + RH_HEADER_BYTES, header_bytes);
    wr32(h + RH_BLOCK_TOKENS, B);
    wr64(h + RH_PAYLOAD_BYTES, payload_bytes);
    wr64(h + RH_STORED_BYTES, stored_bytes);
    wrh(h + RH_NS, ns);
    wrh(h + RH_HASH, hash);
    wrh(h + RH_PARENT, parent);
    uint32_t scheme = key && key->gmac ? KVT_DISK_SCHEME_GMAC : KVT_DISK_SCHEME_BLAKE2B;
    wr32(h + RH_FLAGS, key ? KVT_DISK_FLAG_MAC | scheme << KVT_DISK_FLAG_SCHEME_SHIFT : 0);
    wr32(h + RH_KEY_ID, key ? key->id : 0);
    memset(h + RH_MAC, 0, KVT_DISK_MAC_BYTES);
    if (key) {
        /* a GCM nonce must never repeat under one key: 96 random bits per record (tier_disk.h, "MAC") */
        uint8_t nonce[KVT_DISK_GMAC_NONCE_BYTES] = {0};
        if (scheme == KVT_DISK_SCHEME_GMAC) randombytes_buf(nonce, sizeof nonce);
        record_mac(key, scheme, h, header_bytes + stored_bytes, nonce, h + RH_MAC);
    }
    uint32_t hc = header_crc(h, header_bytes);
    wr32(h + RH_HEADER_CRC, hc);
    wr32(h + RH_CRC, kvt_crc32c(hc, h + header_bytes, stored_bytes));
    uint64_t total = align_up(header_bytes + stored_bytes);
    memset(h + header_bytes + stored_bytes, 0, total - header_bytes - stored_bytes);
    return total;
}

/* The writing side for other tiers (disk_record.h): the same encoder, with
 * the key passed as bytes. */
uint32_t kvt_disk_record_key_id(const uint8_t key[KVT_DISK_KEY_BYTES]) {
    mac_key k;
    memcpy(k.bytes, key, KVT_DISK_KEY_BYTES);
    key_prepare(&k);
    uint32_t id = k.id;
    sodium_memzero(&k, sizeof k);
    return id;
}

uint64_t kvt_disk_record_encode(uint8_t *rec, uint32_t B, kvt_disk_codec codec, uint64_t payload_bytes,
                                uint64_t stored_bytes, kvt_hash128 ns, kvt_hash128 hash, kvt_hash128 parent,
                                const uint8_t *key, uint32_t key_id) {
    mac_key k;
    if (key) {
        memcpy(k.bytes, key, KVT_DISK_KEY_BYTES);
        key_prepare(&k); /* the scheme this machine signs with, as the disk tier does */
        k.id = key_id;
    }
    uint64_t n = record_encode(rec, B, codec, payload_bytes, stored_bytes, ns, hash, parent, key ? &k : NULL);
    if (key) sodium_memzero(&k, sizeof k);
    return n;
}

/* ---- directory: opened once, every file relative to it ------------------ */

/* How dir_open treats the directory. Writers (the store, gc, clear) must own
 * it; readers (walk, header, lifetime) write nothing, so they may inspect
 * another user's directory, but still never follow a link to reach it. */
enum { DIR_READ = 0, DIR_OWNED = 1, DIR_CREATE = 2 };

/* Creates the missing parents of path, 0700 like the cache directory itself;
 * an existing parent is left as it is. A failure surfaces at the final mkdir. */
static void mkdir_parents(const char *path) {
    char *p = kvt_xstrdup(path);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        (void)mkdir(p, DIR_MODE);
        *s = '/';
    }
    free(p);
}

/* Opens the cache directory and returns its fd (or a negative error, with a
 * message that says why and what to do). The last component is never followed
 * through a symlink: a planted link would send every file we create elsewhere.
 * Parents may be links (a home directory often is one). With DIR_CREATE the
 * directory (and missing parents) is created 0700. With DIR_OWNED or
 * DIR_CREATE a directory owned by another user, or writable by group or
 * others, is refused with -EACCES: whoever can write it can plant links,
 * FIFOs or forged records. */
static int dir_open(const char *dir, int how) {
    char path[PATH_MAX];
    size_t n = strlen(dir);
    if (n >= sizeof path) return kvt_fail(-ENAMETOOLONG, "cache dir %s: path too long", dir);
    memcpy(path, dir, n + 1);
    /* "link/" resolves the link in spite of O_NOFOLLOW: drop trailing slashes */
    while (n > 1 && path[n - 1] == '/') path[--n] = 0;
    if (how == DIR_CREATE) {
        mkdir_parents(path);
        if (mkdir(path, DIR_MODE) && errno != EEXIST)
            return kvt_fail(-errno, "cache dir %s: cannot create: %s", dir, strerror(errno));
    }
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        struct stat lb;
        if ((e == ELOOP || e == ENOTDIR) && lstat(path, &lb) == 0 && S_ISLNK(lb.st_mode))
            return kvt_fail(-ELOOP, "cache dir %s is a symbolic link: refusing to follow it (give the directory itself)",
                            dir);
        return kvt_fail(-e, "cache dir %s: cannot open: %s", dir, strerror(e));
    }
    if (how == DIR_READ) return fd;
    struct stat sb;
    if (fstat(fd, &sb)) {
        int e = errno;
        close(fd);
        return kvt_fail(-e, "cache dir %s: cannot stat: %s", dir, strerror(e));
    }
    if (sb.st_uid != geteuid()) {
        close(fd);
        return kvt_fail(-EACCES,
                        "cache dir %s belongs to uid %u, not to this user (uid %u): refusing it, since its owner could "
                        "plant links or forged records there; use a directory of your own",
                        dir, (unsigned)sb.st_uid, (unsigned)geteuid());
    }
    if (sb.st_mode & (S_IWGRP | S_IWOTH)) {
        close(fd);
        return kvt_fail(-EACCES,
                        "cache dir %s is writable by %s (mode %03o): refusing it, since they could plant links or "
                        "forged records there; fix it with `chmod 700 %s`",
                        dir, sb.st_mode & S_IWOTH ? "others" : "its group", (unsigned)(sb.st_mode & 0777), dir);
    }
    return fd;
}

/* Opens an existing (or, with O_CREAT, possibly new) file of the directory
 * dfd. Never through a symlink, and only a regular file: a FIFO would block a
 * read forever, a device would be written to. O_NONBLOCK keeps the open of a
 * FIFO from blocking; it is cleared again because io_uring turns it into
 * -EAGAIN on reads that wait for the disk. O_DIRECT is likewise set only once
 * the file is known to be regular (a FIFO refuses it at open with a vaguer
 * error). A file opened for writing must have no other hard link (we would
 * write into the other name's file too).
 * Returns the fd, or -ELOOP (a link), -EINVAL (not a regular file, or linked
 * elsewhere) or -errno, with a message naming the file. */
static int file_open(int dfd, const char *dir, const char *name, int flags, mode_t mode) {
    int fd = openat(dfd, name, (flags & ~O_DIRECT) | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode);
    if (fd < 0) {
        int e = errno;
        if (e == ELOOP) return kvt_fail(-ELOOP, "cache dir %s: %s is a symbolic link: not followed", dir, name);
        return kvt_fail(-e, "cache dir %s: cannot open %s: %s", dir, name, strerror(e));
    }
    struct stat sb;
    int e = 0;
    if (fstat(fd, &sb)) e = -errno;
    else if (!S_ISREG(sb.st_mode)) e = kvt_fail(-EINVAL, "cache dir %s: %s is not a regular file: not used", dir, name);
    else if ((flags & O_ACCMODE) != O_RDONLY && sb.st_nlink > 1)
        e = kvt_fail(-EINVAL, "cache dir %s: %s has other hard links: not written", dir, name);
    else {
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, (fl & ~O_NONBLOCK) | (flags & O_DIRECT))) e = -errno;
    }
    if (e) {
        close(fd);
        return e;
    }
    return fd;
}

/* Creates the temporary name in dfd for writing, afresh: O_EXCL, so nothing
 * already there (a stale temp from a crash, or a link planted under its name)
 * is ever opened. The old entry is unlinked first; unlinkat removes a link
 * itself, never its target. Returns the fd or a negative error. */
static int tmp_create(int dfd, const char *dir, const char *name, int extra_flags) {
    if (unlinkat(dfd, name, 0) && errno != ENOENT)
        return kvt_fail(-errno, "cache dir %s: cannot remove the stale %s: %s", dir, name, strerror(errno));
    int fd = openat(dfd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | extra_flags, FILE_MODE);
    if (fd < 0) return kvt_fail(-errno, "cache dir %s: cannot create %s: %s", dir, name, strerror(errno));
    return fd;
}

/* Takes the directory's exclusive lock. Returns the lock fd (>= 0), or a
 * negative error naming the holder. A directory where the lock file can be
 * neither created nor opened (read-only and never used) gets -1 with
 * *unlocked set: there is nothing a writer could corrupt. */
static int lock_dir(int dfd, const char *dir, int *unlocked) {
    *unlocked = 0;
    int writable = 1;
    int fd = file_open(dfd, dir, LOCK_NAME, O_RDWR | O_CREAT, FILE_MODE);
    if (fd == -EROFS || fd == -EACCES) {
        writable = 0;
        fd = file_open(dfd, dir, LOCK_NAME, O_RDONLY, 0);
        if (fd == -ENOENT) {
            *unlocked = 1;
            return -1;
        }
    }
    if (fd < 0) return fd; /* file_open said why */
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char pid[32] = "?";
        ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
        if (n > 0) {
            pid[n] = 0;
            pid[strcspn(pid, "\n")] = 0;
        }
        close(fd);
        if (e == EWOULDBLOCK) return kvt_fail(-EWOULDBLOCK, "cache dir %s is in use by pid %s", dir, pid);
        return kvt_fail(-e, "cache dir %s: cannot lock: %s", dir, strerror(e));
    }
    if (writable) {
        char pid[32];
        int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
        if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n)
            kvt_log(KVT_LOG_DEBUG, "cache dir %s: cannot record our pid in the lock file", dir);
    }
    return fd;
}

/* Header file: three text lines, replaced atomically (temp, fsync, rename). */
static int write_header(int dfd, const char *dir, kvt_hash128 ns) {
    char text[HEADER_TEXT_MAX];
    int n = snprintf(text, sizeof text, "%s\nversion %d\nnamespace %016" PRIx64 "%016" PRIx64 "\n", HEADER_TITLE,
                     KVT_DISK_FORMAT_VERSION, ns.hi, ns.lo);
    int fd = tmp_create(dfd, dir, HEADER_TMP_NAME, 0);
    if (fd < 0) return fd;
    int rc = 0;
    if (write(fd, text, (size_t)n) != n) rc = errno ? -errno : -EIO;
    if (!rc && fsync(fd)) rc = -errno;
    close(fd);
    if (!rc && renameat(dfd, HEADER_TMP_NAME, dfd, HEADER_NAME)) rc = -errno;
    if (rc) {
        unlinkat(dfd, HEADER_TMP_NAME, 0);
        return rc;
    }
    fsync(dfd);
    return 0;
}

static int read_header_at(int dfd, const char *dir, uint32_t *version, kvt_hash128 *ns) {
    char text[HEADER_TEXT_MAX];
    int fd = file_open(dfd, dir, HEADER_NAME, O_RDONLY, 0);
    if (fd == -ENOENT) return kvt_fail(KVT_ENOTFOUND, "%s: no header", dir);
    if (fd == -ELOOP || fd == -EINVAL) return KVT_EFORMAT; /* a link or a FIFO is no header: rewritten */
    if (fd < 0) return fd;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n < 0) return -errno;
    text[n] = 0;
    unsigned v;
    uint64_t hi, lo;
    char title[sizeof HEADER_TITLE + 1];
    if (sscanf(text, "%18s version %u namespace %16" SCNx64 "%16" SCNx64, title, &v, &hi, &lo) != 4 ||
        strcmp(title, HEADER_TITLE))
        return kvt_fail(KVT_EFORMAT, "%s/%s: malformed header file", dir, HEADER_NAME);
    *version = v;
    ns->hi = hi;
    ns->lo = lo;
    return 0;
}

int kvt_disk_read_header(const char *dir, uint32_t *version, kvt_hash128 *ns) {
    int dfd = dir_open(dir, DIR_READ);
    if (dfd < 0) return dfd;
    int rc = read_header_at(dfd, dir, version, ns);
    close(dfd);
    return rc;
}

/* Reads the directory's MAC key. It must be a regular file of exactly
 * KVT_DISK_KEY_BYTES, mode 0600, owned by owner (the directory's owner):
 * anyone else who could write it could choose the key and forge records, and
 * anyone who could read it could sign them. Returns 0, KVT_ENOTFOUND (no key
 * file) or a negative error whose message says why and what to do. */
static int key_read(int dfd, const char *dir, uid_t owner, mac_key *key) {
    int fd = file_open(dfd, dir, KEY_NAME, O_RDONLY, 0);
    if (fd == -ENOENT) return KVT_ENOTFOUND;
    if (fd < 0) return fd;
    struct stat sb;
    int rc = 0;
    if (fstat(fd, &sb)) rc = -errno;
    else if (sb.st_uid != owner)
        rc = kvt_fail(-EACCES,
                      "cache dir %s: the key file belongs to uid %u, not to the directory's owner (uid %u): refusing "
                      "it; remove it (records signed with it become misses)",
                      dir, (unsigned)sb.st_uid, (unsigned)owner);
    else if ((sb.st_mode & 07777) != FILE_MODE)
        rc = kvt_fail(-EACCES,
                      "cache dir %s: the key file has mode %03o, not 600: refusing it, since others could read or "
                      "change it; fix it with `chmod 600 %s/%s`",
                      dir, (unsigned)(sb.st_mode & 07777), dir, KEY_NAME);
    else if (sb.st_size != KVT_DISK_KEY_BYTES || read(fd, key->bytes, KVT_DISK_KEY_BYTES) != KVT_DISK_KEY_BYTES)
        rc = kvt_fail(KVT_EFORMAT,
                      "cache dir %s: the key file is not %d bytes: refusing it; remove it (records signed with it "
                      "become misses)",
                      dir, KVT_DISK_KEY_BYTES);
    close(fd);
    if (!rc) key_prepare(key);
    return rc;
}

/* Creates the directory's key: random bytes into a temp file (O_EXCL, 0600,
 * fsync'd), then linked to its name only if the name is free (linkat never
 * replaces), so a crash leaves no key or a whole one. Lock held. */
static int key_create(int dfd, const char *dir, mac_key *key) {
    int fd = tmp_create(dfd, dir, KEY_TMP_NAME, 0);
    if (fd < 0) return fd;
    randombytes_buf(key->bytes, KVT_DISK_KEY_BYTES);
    key_prepare(key);
    int rc = 0;
    if (fchmod(fd, FILE_MODE)) rc = -errno; /* a umask may have narrowed it; key_read wants 0600 exactly */
    else if (write(fd, key->bytes, KVT_DISK_KEY_BYTES) != KVT_DISK_KEY_BYTES) rc = errno ? -errno : -EIO;
    else if (fsync(fd)) rc = -errno;
    close(fd);
    if (!rc && linkat(dfd, KEY_TMP_NAME, dfd, KEY_NAME, 0)) rc = -errno;
    unlinkat(dfd, KEY_TMP_NAME, 0);
    if (rc) return kvt_fail(rc, "cache dir %s: cannot create the key file: %s", dir, strerror(-rc));
    fsync(dfd);
    return 0;
}

/* 1 and *id if name is a segment file name. */
static int parse_seg_name(const char *name, uint64_t *id) {
    size_t lp = strlen(SEG_PREFIX), ls = strlen(SEG_SUFFIX), n = strlen(name);
    if (n != lp + 16 + ls || strncmp(name, SEG_PREFIX, lp) || strcmp(name + lp + 16, SEG_SUFFIX)) return 0;
    uint64_t v = 0;
    for (size_t i = lp; i < lp + 16; i++) {
        char c = name[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return 0;
        v = v << 4 | (uint64_t)d;
    }
    *id = v;
    return 1;
}

static void seg_name(char *out, size_t cap, uint64_t id) {
    snprintf(out, cap, SEG_PREFIX "%016" PRIx64 SEG_SUFFIX, id);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* A fresh directory stream over dfd (its own file description, so listings
 * never share a read position). NULL with errno set on failure. */
static DIR *dir_list(int dfd) {
    int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return NULL;
    DIR *dh = fdopendir(fd);
    if (!dh) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return dh;
}

/* Segment ids in the directory dfd, ascending. warn_foreign logs each unknown
 * file. Returns the count (>= 0) and *ids (caller frees), or -errno. */
static long list_segments(int dfd, const char *dir, int warn_foreign, uint64_t **ids) {
    DIR *dh = dir_list(dfd);
    *ids = NULL;
    if (!dh) return -errno;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(dh))) {
        const char *nm = e->d_name;
        uint64_t id;
        if (parse_seg_name(nm, &id)) {
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                *ids = kvt_xrealloc(*ids, cap * sizeof **ids);
            }
            (*ids)[n++] = id;
            continue;
        }
        size_t len = strlen(nm), lt = strlen(TMP_SUFFIX);
        int known = !strcmp(nm, ".") || !strcmp(nm, "..") || !strcmp(nm, LOCK_NAME) || !strcmp(nm, HEADER_NAME) ||
                    !strcmp(nm, HEADER_TMP_NAME) || !strcmp(nm, PROBE_NAME) || !strcmp(nm, STATS_NAME) ||
                    !strcmp(nm, STATS_TMP_NAME) || !strcmp(nm, KEY_NAME) || !strcmp(nm, KEY_TMP_NAME) ||
                    (len > lt && !strcmp(nm + len - lt, TMP_SUFFIX) && !strncmp(nm, SEG_PREFIX, strlen(SEG_PREFIX)));
        if (!known && warn_foreign) kvt_log(KVT_LOG_WARN, "cache dir %s: ignoring foreign file '%s'", dir, nm);
    }
    closedir(dh);
    if (n) qsort(*ids, n, sizeof **ids, cmp_u64);
    return (long)n;
}

static void *aligned_buf(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, KVT_DISK_ALIGN, n ? align_up(n) : KVT_DISK_ALIGN)) {
        kvt_log(KVT_LOG_ERROR, "out of memory allocating %zu aligned bytes", n);
        abort();
    }
    return p;
}

/* Walks the records of one segment file: reads each header (and with verify
 * the whole record, checking its MAC if key is set and can check it: see
 * mac_checkable), calls fn(ctx, off, bytes, status, rec) per record or bad
 * 4 KiB step. A bad header is stepped over one KVT_DISK_ALIGN at a time, so
 * the next intact record is found again; a record running past the end of the
 * file (a torn tail) is reported corrupt and ends the walk. buf is an aligned
 * scratch of SCAN_READ_BYTES; vbuf/vcap an aligned scratch for verify that
 * grows as needed. Returns 0 or fn's nonzero value. */
typedef int (*scan_fn)(void *ctx, uint64_t off, uint64_t bytes, int status, const kvt_disk_record *rec,
                       const uint8_t *raw);

static int scan_segment(int fd, uint64_t size, int verify, const mac_key *key, uint8_t *buf, uint8_t **vbuf,
                        size_t *vcap, scan_fn fn, void *ctx) {
    uint64_t off = 0;
    while (off + KVT_DISK_HEADER_FIXED <= size) {
        ssize_t n = pread(fd, buf, SCAN_READ_BYTES, (off_t)off);
        if (n <= 0) break;
        kvt_disk_record rec;
        int st = kvt_disk_record_parse(buf, (size_t)n, 0, &rec);
        if (st == 0 && off + rec.header_bytes + rec.stored_bytes > size) {
            int r = fn(ctx, off, size - off, KVT_EFORMAT, &rec, NULL);
            return r;
        }
        if (st != 0) {
            int r = fn(ctx, off, KVT_DISK_ALIGN, st, &rec, NULL);
            if (r) return r;
            off += KVT_DISK_ALIGN;
            continue;
        }
        const uint8_t *raw = NULL;
        if (verify) {
            if (*vcap < rec.record_bytes) {
                free(*vbuf);
                *vcap = rec.record_bytes;
                *vbuf = aligned_buf(*vcap);
            }
            ssize_t k = pread(fd, *vbuf, rec.record_bytes, (off_t)off);
            uint64_t want = rec.header_bytes + rec.stored_bytes;
            if (k < 0 || (uint64_t)k < want || kvt_disk_record_parse(*vbuf, (size_t)k, 1, &rec)) st = KVT_EFORMAT;
            else if (mac_checkable(key, &rec) && record_verify(&rec, key, *vbuf)) st = KVT_EFORMAT;
            else raw = *vbuf;
        }
        int r = fn(ctx, off, rec.record_bytes, st, &rec, raw);
        if (r) return r;
        off += rec.record_bytes;
    }
    return 0;
}

/* ---- the store ---------------------------------------------------------- */

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

    int write_err; /* first write error; writes are disabled once set */
    uint64_t lookup_blocks, lookup_hits; /* kvt_disk_note_lookup, this session */

    /* owner thread only */
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

kvt_disk_params kvt_disk_default_params(void) {
    kvt_disk_params p;
    memset(&p, 0, sizeof p);
    p.size_bytes = DISK_DEFAULT_SIZE;
    p.segment_bytes = KVT_DISK_SEGMENT_DEFAULT;
    p.block_tokens = KVT_BLOCK_TOKENS_DEFAULT;
    p.codec = KVT_DISK_CODEC_RAW;
    p.queue_depth = KVT_DISK_QUEUE_DEFAULT;
    p.put_wait_ms = KVT_DISK_PUT_WAIT_MS_DEFAULT;
    p.use_io_uring = 1;
    p.use_o_direct = 1;
    p.mac = 1;
    return p;
}

/* Drops one reference; closes and frees a reclaimed segment with its last. mu held. */
static void seg_unref(disk_seg *s) {
    if (--s->refs == 0 && s->dead) {
        close(s->fd);
        free(s);
    }
}

static uint32_t rec_alloc(kvt_disk *d) {
    if (d->n_free) return d->free_slots[--d->n_free];
    if (d->n_recs == d->cap_recs) {
        d->cap_recs = d->cap_recs ? 2 * d->cap_recs : RECS_MIN_CAP;
        d->recs = kvt_xrealloc(d->recs, d->cap_recs * sizeof *d->recs);
        d->free_slots = kvt_xrealloc(d->free_slots, d->cap_recs * sizeof *d->free_slots);
    }
    return d->n_recs++;
}

static void push_event(kvt_disk *d, int add, kvt_hash128 hash, kvt_hash128 parent, uint32_t slot,
                       const int32_t *tokens) {
    if (!d->p.index) return;
    if (d->n_ev == d->cap_ev) {
        d->cap_ev = d->cap_ev ? 2 * d->cap_ev : RECS_MIN_CAP;
        d->ev = kvt_xrealloc(d->ev, d->cap_ev * sizeof *d->ev);
    }
    disk_event *e = &d->ev[d->n_ev++];
    e->add = add;
    e->hash = hash;
    e->parent = parent;
    e->slot = slot;
    e->tokens = NULL;
    if (add) {
        e->tokens = kvt_xmalloc(d->p.block_tokens * sizeof(int32_t));
        memcpy(e->tokens, tokens, d->p.block_tokens * sizeof(int32_t));
    }
}

/* Forgets the record at slot (mu held): map, slot, index (via an event). */
static void rec_drop(kvt_disk *d, uint32_t slot) {
    disk_rec *r = &d->recs[slot];
    kvt_hmap128_del(&d->map, r->hash);
    push_event(d, 0, r->hash, r->hash, slot, NULL);
    d->st.live_bytes -= r->bytes;
    r->used = 0;
    r->seg = NULL;
    d->free_slots[d->n_free++] = slot;
}

/* Records a new record (mu held). An existing record under the key is
 * replaced (it is a copy of the same block or a collision the index sorts out). */
static void rec_insert(kvt_disk *d, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, disk_seg *seg,
                       uint64_t off, uint32_t bytes) {
    uint32_t slot;
    if (kvt_hmap128_get(&d->map, hash, &slot)) rec_drop(d, slot);
    slot = rec_alloc(d);
    disk_rec *r = &d->recs[slot];
    memset(r, 0, sizeof *r);
    r->hash = hash;
    r->seg = seg;
    r->off = off;
    r->bytes = bytes;
    r->used = 1;
    kvt_hmap128_put(&d->map, hash, slot);
    d->st.live_bytes += bytes;
    push_event(d, 1, hash, parent, slot, tokens);
}

/* Applies queued index updates on the owner's thread. A refused add (the key
 * names another block in the index) drops the record from the store. */
static void apply_events_locked(kvt_disk *d) {
    for (size_t i = 0; i < d->n_ev; i++) {
        disk_event *e = &d->ev[i];
        if (e->add) {
            int rc = kvt_prefix_add(d->p.index, e->hash, e->parent, e->tokens, KVT_TIER_T2, e->slot);
            if (rc == -EEXIST) {
                d->st.collisions++;
                uint32_t slot;
                if (kvt_hmap128_get(&d->map, e->hash, &slot) && slot == e->slot) {
                    /* not in the index: drop without a remove event */
                    kvt_prefix *idx = d->p.index;
                    d->p.index = NULL;
                    rec_drop(d, slot);
                    d->p.index = idx;
                }
            }
            free(e->tokens);
        } else {
            kvt_prefix_remove(d->p.index, e->hash, KVT_TIER_T2); /* KVT_ENOTFOUND after a refused add */
        }
    }
    d->n_ev = 0;
}

void kvt_disk_poll(kvt_disk *d) {
    pthread_mutex_lock(&d->mu);
    apply_events_locked(d);
    pthread_mutex_unlock(&d->mu);
}

static uint64_t segs_bytes(const kvt_disk *d) {
    uint64_t s = 0;
    for (size_t i = 0; i < d->n_segs; i++) s += d->segs[i]->bytes;
    return s;
}

static void segs_push(kvt_disk *d, disk_seg *s) {
    if (d->n_segs == d->cap_segs) {
        d->cap_segs = d->cap_segs ? 2 * d->cap_segs : 16;
        d->segs = kvt_xrealloc(d->segs, d->cap_segs * sizeof *d->segs);
    }
    d->segs[d->n_segs++] = s;
}

/* Disables writes after the first failure, with one warning (mu held). */
static void disable_writes(kvt_disk *d, int err, const char *what) {
    d->st.write_errors++;
    if (d->write_err) return;
    d->write_err = err ? err : -EIO;
    d->st.writes_disabled = 1;
    kvt_log(KVT_LOG_WARN, "disk tier %s: %s failed (%s); writes disabled, reads continue", d->dir, what,
            strerror(-d->write_err));
}

/* One reinsertion candidate taken out of a reclaimed segment. */
typedef struct {
    uint32_t slot;
    uint64_t at; /* offset in the reinsertion buffer */
    uint32_t bytes;
} disk_move;

/* Reclaims the oldest segments until the sealed ones fit in size_bytes (mu
 * held). Records that were hit are marked moving and listed in *moves (up to
 * move_cap bytes in total), with their segment referenced in *srcs so the
 * caller can copy them; the rest leave the store. */
static size_t reclaim_locked(kvt_disk *d, uint64_t move_cap, disk_move **moves, size_t *n_moves, disk_seg ***srcs,
                             uint64_t **src_offs) {
    size_t reclaimed = 0;
    uint64_t used = segs_bytes(d), moved = 0;
    while (d->n_segs && used > d->p.size_bytes && d->segs[0] != d->head) {
        disk_seg *v = d->segs[0];
        memmove(d->segs, d->segs + 1, (d->n_segs - 1) * sizeof *d->segs);
        d->n_segs--;
        for (uint32_t i = 0; i < d->n_recs; i++) {
            disk_rec *r = &d->recs[i];
            if (!r->used || r->seg != v) continue;
            if (r->hit && moves && moved + r->bytes <= move_cap) {
                *moves = kvt_xrealloc(*moves, (*n_moves + 1) * sizeof **moves);
                *srcs = kvt_xrealloc(*srcs, (*n_moves + 1) * sizeof **srcs);
                *src_offs = kvt_xrealloc(*src_offs, (*n_moves + 1) * sizeof **src_offs);
                (*moves)[*n_moves] = (disk_move){i, moved, r->bytes};
                (*srcs)[*n_moves] = v;
                (*src_offs)[*n_moves] = r->off;
                (*n_moves)++;
                moved += r->bytes;
                v->refs++;
                r->seg = NULL;
                r->moving = 1;
            } else {
                rec_drop(d, i);
                d->st.evicted++;
            }
        }
        char nm[SEG_NAME_MAX];
        seg_name(nm, sizeof nm, v->id);
        if (unlinkat(d->dir_fd, nm, 0) && errno != ENOENT)
            kvt_log(KVT_LOG_WARN, "disk tier %s: cannot remove %s: %s", d->dir, nm, strerror(errno));
        used -= v->bytes;
        v->dead = 1;
        v->refs++;
        seg_unref(v);
        d->st.segments_reclaimed++;
        reclaimed++;
    }
    return reclaimed;
}

/* Starts a new head segment: seals the current one, reclaims old segments,
 * creates the file, and rewrites the reclaimed records that were hit.
 * Writer thread. Returns 0 or -errno (writes then disabled). */
static int rotate(kvt_disk *d) {
    uint64_t move_cap = align_up(d->p.segment_bytes / REINSERT_DIVISOR);
    disk_move *moves = NULL;
    disk_seg **srcs = NULL;
    uint64_t *src_offs = NULL;
    size_t n_moves = 0;
    if (d->head) fdatasync(d->head->fd); /* only this thread changes head */
    pthread_mutex_lock(&d->mu);
    d->head = NULL;
    reclaim_locked(d, move_cap, &moves, &n_moves, &srcs, &src_offs);
    pthread_mutex_unlock(&d->mu);

    /* copy the moving records out before their files are closed */
    uint8_t *mbuf = n_moves ? aligned_buf(move_cap) : NULL;
    int *ok = n_moves ? kvt_xcalloc(n_moves, sizeof *ok) : NULL;
    for (size_t i = 0; i < n_moves; i++) {
        kvt_dio_req rq = {srcs[i]->fd, src_offs[i], moves[i].bytes, mbuf + moves[i].at, 0, NULL};
        kvt_dio_read_batch(d->wio, &rq, 1, NULL, NULL);
        kvt_disk_record rec;
        ok[i] = rq.res == (ssize_t)moves[i].bytes && kvt_disk_record_parse(rq.buf, moves[i].bytes, 1, &rec) == 0;
    }

    int rc = 0;
    disk_seg *s = kvt_xcalloc(1, sizeof *s);
    s->id = d->next_seg_id++;
    char nm[SEG_NAME_MAX];
    seg_name(nm, sizeof nm, s->id);
    /* O_EXCL: a new name, never an existing file or a link planted under it */
    s->fd = openat(d->dir_fd, nm, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | (d->o_direct ? O_DIRECT : 0),
                   FILE_MODE);
    if (s->fd < 0) {
        rc = -errno;
        free(s);
        s = NULL;
    }

    pthread_mutex_lock(&d->mu);
    for (size_t i = 0; i < n_moves; i++) seg_unref(srcs[i]);
    if (s) {
        segs_push(d, s);
        d->head = s;
    } else {
        disable_writes(d, rc, "creating a segment");
    }
    pthread_mutex_unlock(&d->mu);

    for (size_t i = 0; i < n_moves; i++) {
        int wrc = -1;
        if (s && ok[i] && s->bytes + moves[i].bytes <= d->p.segment_bytes) {
            double t0 = kvt_now();
            wrc = kvt_dio_write(d->wio, s->fd, mbuf + moves[i].at, moves[i].bytes, s->bytes);
            pthread_mutex_lock(&d->mu);
            d->st.write_seconds += kvt_now() - t0;
            if (wrc) disable_writes(d, wrc, "rewriting a hit record");
            pthread_mutex_unlock(&d->mu);
        }
        pthread_mutex_lock(&d->mu);
        disk_rec *r = &d->recs[moves[i].slot];
        if (r->used && r->moving) { /* not removed meanwhile */
            r->moving = 0;
            if (wrc == 0) {
                r->seg = s;
                r->off = s->bytes;
                r->hit = 0;
                s->bytes += moves[i].bytes;
                d->st.reinserted++;
                d->st.bytes_written += moves[i].bytes;
            } else {
                rec_drop(d, moves[i].slot);
                d->st.evicted++;
            }
        }
        pthread_mutex_unlock(&d->mu);
    }
    free(mbuf);
    free(ok);
    free(moves);
    free(srcs);
    free(src_offs);
    return rc;
}

/* A queued block that will not be written (writes disabled or failed): it
 * leaves the tier. Its index presence was added by kvt_disk_put, so it is
 * removed through an event like any record (mu held). */
static void queued_lost(kvt_disk *d, const disk_qslot *q) {
    d->st.dropped++;
    if (!kvt_hmap128_get(&d->map, q->hash, NULL)) push_event(d, 0, q->hash, q->hash, 0, NULL);
    /* with writes disabled, disable_writes has said so once already */
    if (!d->write_err && (d->st.dropped <= DROP_LOG_FIRST || d->st.dropped % DROP_LOG_EVERY == 0))
        kvt_log(KVT_LOG_WARN, "disk tier %s: a block could not be written (%" PRIu64 " dropped so far)", d->dir,
                d->st.dropped);
}

/* Encodes and appends one queued block. Writer thread. */
static void write_block(kvt_disk *d, disk_qslot *q) {
    pthread_mutex_lock(&d->mu);
    int skip = q->cancelled ? 3 : d->write_err ? 1 : kvt_hmap128_get(&d->map, q->hash, NULL) ? 2 : 0;
    if (skip == 1) queued_lost(d, q);
    if (skip == 2) d->st.dup_puts++;
    pthread_mutex_unlock(&d->mu);
    if (skip) return;

    uint32_t hb = d->header_bytes;
    uint8_t *rec = q->buf;
    uint64_t stored = d->p.payload_bytes;
    kvt_disk_codec codec = KVT_DISK_CODEC_RAW;
    if (d->p.codec == KVT_DISK_CODEC_ZSTD) {
        /* keep zstd only when it saves space; otherwise the raw record is smaller */
        size_t n = ZSTD_compressCCtx(d->zc, d->wbuf + hb, d->p.payload_bytes - 1, q->buf + hb, d->p.payload_bytes,
                                     ZSTD_LEVEL);
        if (!ZSTD_isError(n)) {
            memcpy(d->wbuf + RH_TOKENS, q->buf + RH_TOKENS, hb - RH_TOKENS);
            rec = d->wbuf;
            stored = n;
            codec = KVT_DISK_CODEC_ZSTD;
        }
    }
    uint64_t bytes = record_encode(rec, d->p.block_tokens, codec, d->p.payload_bytes, stored, d->p.ns, q->hash,
                                   q->parent, d->p.mac ? &d->key : NULL);
    int rc = 0;
    if (!d->head || d->head->bytes + bytes > d->p.segment_bytes) rc = rotate(d);
    if (rc) {
        pthread_mutex_lock(&d->mu);
        queued_lost(d, q);
        pthread_mutex_unlock(&d->mu);
        return;
    }
    disk_seg *s = d->head;
    double t0 = kvt_now();
    rc = kvt_dio_write(d->wio, s->fd, rec, bytes, s->bytes);
    double dt = kvt_now() - t0;
    pthread_mutex_lock(&d->mu);
    d->st.write_seconds += dt;
    if (rc) {
        disable_writes(d, rc, "writing a record");
        queued_lost(d, q);
    } else {
        rec_insert(d, q->hash, q->parent, (const int32_t *)(const void *)(rec + RH_TOKENS), s, s->bytes,
                   (uint32_t)bytes);
        s->bytes += bytes;
        d->st.puts++;
        d->st.bytes_written += bytes;
        d->st.payload_in += d->p.payload_bytes;
        d->st.stored_out += stored;
    }
    pthread_mutex_unlock(&d->mu);
}

static void *writer_main(void *arg) {
    kvt_disk *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while ((!d->q_count || d->paused) && !d->stop) pthread_cond_wait(&d->cv_work, &d->mu);
        if (!d->q_count) break;
        disk_qslot *q = &d->q[d->q_head];
        d->writer_busy = 1;
        pthread_mutex_unlock(&d->mu);
        write_block(d, q);
        pthread_mutex_lock(&d->mu);
        d->q_head = (d->q_head + 1) % d->p.queue_depth;
        d->q_count--;
        d->writer_busy = 0;
        pthread_cond_broadcast(&d->cv_room);
        if (!d->q_count) pthread_cond_broadcast(&d->cv_idle);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* ---- open ---------------------------------------------------------------- */

/* Tries O_DIRECT in dir: an aligned write and read of one block. */
static int probe_o_direct(int dfd, const char *dir) {
    int fd = tmp_create(dfd, dir, PROBE_NAME, O_DIRECT);
    if (fd < 0) return fd;
    uint8_t *b = aligned_buf(KVT_DISK_ALIGN);
    memset(b, 0, KVT_DISK_ALIGN);
    int rc = 0;
    if (pwrite(fd, b, KVT_DISK_ALIGN, 0) != KVT_DISK_ALIGN || pread(fd, b, KVT_DISK_ALIGN, 0) != KVT_DISK_ALIGN)
        rc = errno ? -errno : -EIO;
    free(b);
    close(fd);
    unlinkat(dfd, PROBE_NAME, 0);
    return rc;
}

typedef struct {
    kvt_disk *d;
    disk_seg *seg;
    uint64_t bad_run_end; /* end of the last bad 4 KiB run, to count a run once */
    uint64_t no_mac, lost_key, no_scheme; /* with MAC on: records without one, signed under a key we lack, or
                                             under a scheme not computed here */
} open_scan;

static int open_scan_fn(void *ctx, uint64_t off, uint64_t bytes, int status, const kvt_disk_record *rec,
                        const uint8_t *raw) {
    open_scan *o = ctx;
    kvt_disk *d = o->d;
    if (status == KVT_EUNSUPPORTED) {
        d->st.foreign++;
        return 0;
    }
    if (status) {
        if (off != o->bad_run_end) d->st.corrupt++;
        o->bad_run_end = off + bytes;
        return 0;
    }
    if (!kvt_hash128_eq(rec->ns, d->p.ns) || rec->block_tokens != d->p.block_tokens ||
        rec->payload_bytes != d->p.payload_bytes) {
        d->st.foreign++;
        return 0;
    }
    /* With MAC on, only records whose MAC can be checked at read are indexed;
     * the MAC itself is checked when the payload is read (the scan reads
     * headers only). Without MAC every CRC-valid record is taken. */
    if (d->p.mac && (d->key_state == KEY_NONE || !mac_checkable(&d->key, rec))) {
        if (!(rec->flags & KVT_DISK_FLAG_MAC)) o->no_mac++;
        else if (d->key_state == KEY_NONE || rec->key_id != d->key.id) o->lost_key++;
        else o->no_scheme++;
        d->st.foreign++;
        return 0;
    }
    /* a later copy (reinsertion) supersedes an earlier one */
    rec_insert(d, rec->hash, rec->parent, rec->tokens, o->seg, off, (uint32_t)bytes);
    return 0;
}

/* Opens every existing segment and indexes its records. */
static int scan_dir(kvt_disk *d, int ignore_records) {
    uint64_t *ids;
    long n = list_segments(d->dir_fd, d->dir, 1, &ids);
    if (n < 0) return kvt_fail((int)n, "cache dir %s: cannot list: %s", d->dir, strerror((int)-n));
    uint8_t *buf = aligned_buf(SCAN_READ_BYTES);
    uint64_t no_mac = 0, lost_key = 0, no_scheme = 0;
    for (long i = 0; i < n; i++) {
        char nm[SEG_NAME_MAX];
        seg_name(nm, sizeof nm, ids[i]);
        /* a link or a FIFO under a segment's name is skipped, never followed or waited on */
        int fd = file_open(d->dir_fd, d->dir, nm, O_RDONLY | (d->o_direct ? O_DIRECT : 0), 0);
        struct stat sb;
        if (fd < 0 || fstat(fd, &sb)) {
            kvt_log(KVT_LOG_WARN, "%s", fd < 0 ? kvt_errmsg() : strerror(errno));
            d->st.read_errors++;
            if (fd >= 0) close(fd);
            continue;
        }
        disk_seg *s = kvt_xcalloc(1, sizeof *s);
        s->id = ids[i];
        s->fd = fd;
        s->bytes = (uint64_t)sb.st_size;
        segs_push(d, s);
        if (ignore_records) continue;
        open_scan o = {d, s, UINT64_MAX, 0, 0, 0};
        scan_segment(fd, s->bytes, 0, NULL, buf, NULL, NULL, open_scan_fn, &o);
        no_mac += o.no_mac;
        lost_key += o.lost_key;
        no_scheme += o.no_scheme;
    }
    if (lost_key)
        kvt_log(KVT_LOG_WARN,
                "cache dir %s: %" PRIu64 " records are signed with a key this directory no longer has (its key file "
                "was lost%s): they are misses",
                d->dir, lost_key, d->key_state == KEY_NEW ? ", so a new one was made" : "");
    if (no_mac)
        kvt_log(KVT_LOG_INFO, "cache dir %s: %" PRIu64 " records without a MAC (written with --kv-disk-no-mac) are misses",
                d->dir, no_mac);
    if (no_scheme)
        kvt_log(KVT_LOG_WARN,
                "cache dir %s: %" PRIu64 " records carry a MAC of a scheme this machine cannot compute (AES-256-GCM "
                "without AES-NI and PCLMUL, or a later build's): they are misses",
                d->dir, no_scheme);
    d->next_seg_id = n ? ids[n - 1] + 1 : 0;
    free(buf);
    free(ids);
    return 0;
}

static void disk_free(kvt_disk *d);

int kvt_disk_open(const kvt_disk_params *p, kvt_disk **out) {
    *out = NULL;
    if (!p->dir || !*p->dir) return kvt_fail(KVT_EARG, "disk tier: no directory");
    if (!p->payload_bytes || p->payload_bytes > KVT_DISK_PAYLOAD_MAX)
        return kvt_fail(KVT_EARG, "disk tier: payload_bytes %zu outside 1..%llu", p->payload_bytes,
                        (unsigned long long)KVT_DISK_PAYLOAD_MAX);
    if (p->block_tokens == 0 || p->block_tokens > KVT_BLOCK_TOKENS_MAX)
        return kvt_fail(KVT_EARG, "disk tier: block size %u outside 1..%d", p->block_tokens, KVT_BLOCK_TOKENS_MAX);
    if (p->index && kvt_prefix_block_tokens(p->index) != p->block_tokens)
        return kvt_fail(KVT_EARG, "disk tier: block size %u but the index uses %u", p->block_tokens,
                        kvt_prefix_block_tokens(p->index));
    if (p->codec >= KVT_DISK_CODEC_COUNT) return kvt_fail(KVT_EARG, "disk tier: unknown codec %d", (int)p->codec);
    if (!p->queue_depth) return kvt_fail(KVT_EARG, "disk tier: queue_depth is 0");
    uint32_t hb = KVT_DISK_HEADER_FIXED + 4 * p->block_tokens;
    uint64_t rec_max = align_up(hb + p->payload_bytes);
    if (p->segment_bytes % KVT_DISK_ALIGN || p->segment_bytes < rec_max)
        return kvt_fail(KVT_EARG, "disk tier: segment size %llu must be a multiple of %d holding a %llu-byte record",
                        (unsigned long long)p->segment_bytes, KVT_DISK_ALIGN, (unsigned long long)rec_max);
    if (p->size_bytes / 2 < p->segment_bytes)
        return kvt_fail(KVT_EARG, "disk tier: size %llu must hold at least two %llu-byte segments",
                        (unsigned long long)p->size_bytes, (unsigned long long)p->segment_bytes);

    int dfd = dir_open(p->dir, DIR_CREATE);
    if (dfd < 0) return dfd;
    int unlocked;
    int lock_fd = lock_dir(dfd, p->dir, &unlocked);
    if (lock_fd < 0 && !unlocked) {
        close(dfd);
        return lock_fd;
    }

    kvt_disk *d = kvt_xcalloc(1, sizeof *d);
    d->p = *p;
    d->dir = kvt_xstrdup(p->dir);
    d->p.dir = d->dir;
    d->dir_fd = dfd;
    d->lock_fd = lock_fd;
    d->header_bytes = hb;
    d->rec_max = rec_max;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv_work, NULL);
    pthread_cond_init(&d->cv_idle, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&d->cv_room, &ca);
    pthread_condattr_destroy(&ca);
    d->st.budget_bytes = p->size_bytes;
    d->st.compression_ratio = 1.0;
    d->q = kvt_xcalloc(p->queue_depth, sizeof *d->q);
    d->zd = ZSTD_createDCtx();
    double t0 = kvt_now();

    /* The header names the format of everything here: another version means
     * the existing records cannot be trusted to parse; they stay foreign (and
     * are reclaimed oldest-first) and the header is rewritten for ours. */
    uint32_t version = KVT_DISK_FORMAT_VERSION;
    kvt_hash128 hns = p->ns;
    int hrc = read_header_at(d->dir_fd, d->dir, &version, &hns);
    int ignore_records = 0, need_header = hrc != 0;
    if (hrc == KVT_EFORMAT) kvt_log(KVT_LOG_WARN, "%s", kvt_errmsg());
    if (hrc == 0 && version != KVT_DISK_FORMAT_VERSION) {
        kvt_log(KVT_LOG_WARN, "cache dir %s has format version %u, this build uses %d: its records are ignored",
                d->dir, version, KVT_DISK_FORMAT_VERSION);
        ignore_records = 1;
        need_header = 1;
    } else if (hrc == 0 && !kvt_hash128_eq(hns, p->ns)) {
        kvt_log(KVT_LOG_WARN,
                "cache dir %s was last used by namespace %016" PRIx64 "%016" PRIx64
                ": records of other namespaces are misses",
                d->dir, hns.hi, hns.lo);
        need_header = 1;
    }
    if (unlocked) {
        disable_writes(d, -EROFS, "creating the lock file");
    } else if (faccessat(d->dir_fd, ".", W_OK, 0) != 0) {
        disable_writes(d, -errno, "opening the directory for writing");
    } else if (need_header) {
        int wrc = write_header(d->dir_fd, d->dir, p->ns);
        if (wrc) disable_writes(d, wrc, "writing the header");
    }
    if (p->mac) {
        const char *scheme = getenv(MAC_SCHEME_ENV);
        if (scheme && *scheme && strcmp(scheme, MAC_SCHEME_PORTABLE))
            kvt_log(KVT_LOG_WARN, "%s=%s: only '%s' means anything (for tests and benchmarks); ignored", MAC_SCHEME_ENV,
                    scheme, MAC_SCHEME_PORTABLE);
        /* the key is made under the lock, so two openers never race to make it */
        int krc = sodium_init() < 0 ? kvt_fail(KVT_EUNSUPPORTED, "libsodium cannot start") : 0;
        if (!krc) krc = key_read(d->dir_fd, d->dir, geteuid(), &d->key);
        if (krc == 0) {
            d->key_state = KEY_READ;
        } else if (krc == KVT_ENOTFOUND && !d->write_err) {
            krc = key_create(d->dir_fd, d->dir, &d->key);
            if (krc == 0) d->key_state = KEY_NEW;
            else disable_writes(d, krc, "creating the key file"); /* no key: nothing can be written or trusted */
        } else if (krc != KVT_ENOTFOUND) {
            disk_free(d); /* a key someone else could read or have chosen: refuse the directory */
            return krc;
        }
    }

    if (p->use_o_direct && !d->write_err) {
        int prc = probe_o_direct(d->dir_fd, d->dir);
        d->o_direct = prc == 0;
        if (prc)
            kvt_log(KVT_LOG_INFO, "disk tier %s: O_DIRECT not supported here (%s); using buffered I/O", d->dir,
                    strerror(-prc));
    }
    int rc = scan_dir(d, ignore_records);
    if (rc) {
        disk_free(d);
        return rc;
    }
    /* a smaller budget than last time: trim before anything is written */
    reclaim_locked(d, 0, NULL, NULL, NULL, NULL);
    d->st.open_scan_seconds = kvt_now() - t0;

    kvt_dio_new(READ_DEPTH, p->use_io_uring, &d->rio);
    kvt_dio_new(1, p->use_io_uring, &d->wio);
    if (p->use_io_uring && !kvt_dio_uses_uring(d->rio))
        kvt_log(KVT_LOG_INFO, "disk tier %s: io_uring unavailable; using pread/pwrite", d->dir);
    d->st.io_uring = kvt_dio_uses_uring(d->rio);
    d->st.o_direct = d->o_direct;
    if (p->codec == KVT_DISK_CODEC_ZSTD) {
        d->zc = ZSTD_createCCtx();
        d->wbuf = aligned_buf(rec_max);
    }
    apply_events_locked(d);
    if (pthread_create(&d->writer, NULL, writer_main, d)) {
        disk_free(d);
        return kvt_fail(-EAGAIN, "disk tier: cannot start the writer thread");
    }
    d->writer_started = 1;
    kvt_log(KVT_LOG_DEBUG, "disk tier %s: %zu records in %zu segments, scanned in %.3f s; MAC %s", d->dir,
            (size_t)d->map.count, d->n_segs, d->st.open_scan_seconds,
            !p->mac ? "off" : d->key.gmac ? "AES-256-GCM (GMAC)" : "BLAKE2b");
    *out = d;
    return 0;
}

static void disk_free(kvt_disk *d) {
    pthread_mutex_lock(&d->mu);
    apply_events_locked(d);
    if (d->p.index)
        for (uint32_t i = 0; i < d->n_recs; i++)
            if (d->recs[i].used) kvt_prefix_remove(d->p.index, d->recs[i].hash, KVT_TIER_T2);
    pthread_mutex_unlock(&d->mu);
    for (size_t i = 0; i < d->n_segs; i++) {
        close(d->segs[i]->fd);
        free(d->segs[i]);
    }
    for (uint32_t i = 0; i < d->p.queue_depth; i++) free(d->q[i].buf);
    free(d->q);
    free(d->segs);
    free(d->recs);
    free(d->free_slots);
    free(d->ev);
    kvt_hmap128_free(&d->map);
    kvt_dio_free(d->rio);
    kvt_dio_free(d->wio);
    free(d->rbuf);
    free(d->wbuf);
    ZSTD_freeDCtx(d->zd);
    ZSTD_freeCCtx(d->zc);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv_work);
    pthread_cond_destroy(&d->cv_idle);
    pthread_cond_destroy(&d->cv_room);
    if (d->lock_fd >= 0) close(d->lock_fd); /* releases the flock */
    close(d->dir_fd);
    sodium_memzero(&d->key, sizeof d->key);
    free(d->dir);
    free(d);
}

void kvt_disk_note_lookup(kvt_disk *d, uint64_t blocks, uint64_t hits) {
    pthread_mutex_lock(&d->mu);
    d->lookup_blocks += blocks;
    d->lookup_hits += hits;
    pthread_mutex_unlock(&d->mu);
}

/* The lifetime file: one "name value" line per counter, in this order. */
#define LIFETIME_FIELDS(X)                                                                         \
    X(sessions) X(lookup_blocks) X(lookup_hits) X(reads) X(read_misses) X(records_written)         \
    X(writes_dropped) X(corrupt) X(bytes_read) X(bytes_written) X(evicted)

static int read_lifetime_at(int dfd, const char *dir, kvt_disk_lifetime *out) {
    memset(out, 0, sizeof *out);
    int fd = file_open(dfd, dir, STATS_NAME, O_RDONLY, 0);
    if (fd < 0) return fd == -ENOENT ? KVT_ENOTFOUND : fd;
    FILE *f = fdopen(fd, "r");
    if (!f) {
        close(fd);
        return -ENOMEM;
    }
    char name[64];
    unsigned long long v;
    while (fscanf(f, "%63s %llu", name, &v) == 2) {
#define READ_FIELD(F) if (!strcmp(name, #F)) out->F = v;
        LIFETIME_FIELDS(READ_FIELD)
#undef READ_FIELD
    }
    fclose(f);
    return 0;
}

int kvt_disk_read_lifetime(const char *dir, kvt_disk_lifetime *out) {
    memset(out, 0, sizeof *out);
    int dfd = dir_open(dir, DIR_READ);
    if (dfd < 0) return dfd;
    int rc = read_lifetime_at(dfd, dir, out);
    close(dfd);
    return rc;
}

/* Adds this session's counters to the lifetime file (temp, fsync, rename).
 * Best effort: a read-only or full directory keeps the old file. */
static void write_lifetime(kvt_disk *d) {
    kvt_disk_lifetime t;
    read_lifetime_at(d->dir_fd, d->dir, &t);
    t.sessions++;
    t.lookup_blocks += d->lookup_blocks;
    t.lookup_hits += d->lookup_hits;
    t.reads += d->st.hits;
    t.read_misses += d->st.misses;
    t.records_written += d->st.puts;
    t.writes_dropped += d->st.dropped;
    t.corrupt += d->st.corrupt;
    t.bytes_read += d->st.bytes_read;
    t.bytes_written += d->st.bytes_written;
    t.evicted += d->st.evicted;
    int fd = tmp_create(d->dir_fd, d->dir, STATS_TMP_NAME, 0);
    if (fd < 0) return;
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        unlinkat(d->dir_fd, STATS_TMP_NAME, 0);
        return;
    }
#define WRITE_FIELD(F) fprintf(f, "%s %llu\n", #F, (unsigned long long)t.F);
    LIFETIME_FIELDS(WRITE_FIELD)
#undef WRITE_FIELD
    int ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = fclose(f) == 0 && ok;
    if (ok && renameat(d->dir_fd, STATS_TMP_NAME, d->dir_fd, STATS_NAME) == 0) fsync(d->dir_fd);
    else unlinkat(d->dir_fd, STATS_TMP_NAME, 0);
}

void kvt_disk_close(kvt_disk *d) {
    if (!d) return;
    if (d->writer_started) {
        pthread_mutex_lock(&d->mu);
        d->stop = 1;
        pthread_cond_broadcast(&d->cv_work);
        pthread_mutex_unlock(&d->mu);
        pthread_join(d->writer, NULL); /* drains the queue first */
    }
    if (d->head) fdatasync(d->head->fd);
    if (d->lock_fd >= 0) write_lifetime(d); /* we own the directory: nobody else writes it */
    disk_free(d);
}

/* ---- owner API ---------------------------------------------------------- */

/* The queue slot holding hash, or NULL (mu held). */
static disk_qslot *queued_slot(kvt_disk *d, kvt_hash128 hash) {
    for (uint32_t i = 0; i < d->q_count; i++) {
        disk_qslot *q = &d->q[(d->q_head + i) % d->p.queue_depth];
        if (!q->cancelled && kvt_hash128_eq(q->hash, hash)) return q;
    }
    return NULL;
}

/* Waits (mu held) until the queue has a free slot or wait_ms pass. */
static void wait_for_room(kvt_disk *d) {
    if (d->q_count < d->p.queue_depth || !d->p.put_wait_ms) return;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += d->p.put_wait_ms / 1000;
    until.tv_nsec += (long)(d->p.put_wait_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    double t0 = kvt_now();
    d->st.put_waits++;
    while (d->q_count == d->p.queue_depth && !d->write_err)
        if (pthread_cond_timedwait(&d->cv_room, &d->mu, &until) == ETIMEDOUT) break;
    d->st.put_wait_seconds += kvt_now() - t0;
}

int kvt_disk_put(kvt_disk *d, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, const void *payload) {
    pthread_mutex_lock(&d->mu);
    apply_events_locked(d);
    int rc = 0;
    if (d->write_err) rc = KVT_EUNSUPPORTED;
    else if (kvt_hmap128_get(&d->map, hash, NULL) || queued_slot(d, hash)) rc = 1;
    if (!rc) wait_for_room(d);
    if (!rc && d->write_err) rc = KVT_EUNSUPPORTED;
    else if (!rc && d->q_count == d->p.queue_depth) rc = KVT_ELIMIT;
    /* Visible from now on: the index learns of the block before it is
     * written, and reads serve it from the queue until then. All earlier
     * events were applied above, so none can undo this presence. */
    if (!rc && d->p.index && kvt_prefix_add(d->p.index, hash, parent, tokens, KVT_TIER_T2, QUEUED_HANDLE)) {
        d->st.collisions++;
        rc = -EEXIST;
    }
    if (rc == KVT_ELIMIT || rc == KVT_EUNSUPPORTED) d->st.dropped++;
    if (rc == KVT_ELIMIT && (d->st.dropped <= DROP_LOG_FIRST || d->st.dropped % DROP_LOG_EVERY == 0))
        kvt_log(KVT_LOG_WARN,
                "disk tier %s: the writer stayed behind for %u ms; a block was dropped (%" PRIu64 " so far)",
                d->dir, d->p.put_wait_ms, d->st.dropped);
    if (rc == 1) d->st.dup_puts++;
    uint32_t at = (d->q_head + d->q_count) % d->p.queue_depth;
    if (!rc) {
        /* The slot past the tail is ours until q_count covers it: only this
         * (serialised) caller fills slots, the writer only drains committed
         * ones. Filled under mu so that a concurrent reader of the queue
         * (this same thread, later) sees a whole slot. */
        disk_qslot *q = &d->q[at];
        if (!q->buf) q->buf = aligned_buf(d->rec_max);
        q->hash = hash;
        q->parent = parent;
        q->cancelled = 0;
        memcpy(q->buf + RH_TOKENS, tokens, d->p.block_tokens * sizeof(int32_t));
        memcpy(q->buf + d->header_bytes, payload, d->p.payload_bytes);
        d->q_count++;
        pthread_cond_signal(&d->cv_work);
    }
    pthread_mutex_unlock(&d->mu);
    return rc;
}

/* Serves reqs that are still queued for writing from the queue (mu held);
 * the writer only reads the payload and tokens of a slot, so copying them
 * here is safe. Returns the hits. */
static size_t read_queued(kvt_disk *d, kvt_disk_read *reqs, size_t n) {
    size_t hits = 0;
    for (size_t i = 0; i < n; i++) {
        if (reqs[i].result == 0 || kvt_hmap128_get(&d->map, reqs[i].hash, NULL)) continue;
        disk_qslot *q = queued_slot(d, reqs[i].hash);
        if (!q || !kvt_hash128_eq(q->parent, reqs[i].parent) ||
            memcmp(q->buf + RH_TOKENS, reqs[i].tokens, d->p.block_tokens * sizeof(int32_t)))
            continue;
        memcpy(reqs[i].out, q->buf + d->header_bytes, d->p.payload_bytes);
        reqs[i].result = 0;
        hits++;
    }
    d->st.queue_hits += hits;
    return hits;
}

/* One planned record read of a batch. */
typedef struct {
    kvt_disk_read *req;
    uint32_t slot;
    disk_seg *seg;
    uint64_t off;
    uint32_t bytes;
    uint8_t *buf;  /* where the record lands in the read arena */
    int status;    /* 0 hit, 1 miss (mismatch), 2 corrupt, 3 read error */
} disk_plan;

typedef struct {
    disk_plan **plans; /* sorted by (segment, offset) */
    size_t first, count;
} disk_extent;

typedef struct {
    kvt_disk *d;
} read_ctx;

static int plan_cmp(const void *a, const void *b) {
    const disk_plan *x = *(disk_plan *const *)a, *y = *(disk_plan *const *)b;
    if (x->seg->id != y->seg->id) return x->seg->id < y->seg->id ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Checks and decodes one record read into its arena slot. */
static void finish_plan(kvt_disk *d, disk_plan *pl, ssize_t got) {
    if (got < 0) {
        pl->status = 3;
        return;
    }
    kvt_disk_record rec;
    if (kvt_disk_record_parse(pl->buf, (size_t)got, 1, &rec) || rec.record_bytes != pl->bytes ||
        (d->p.mac && record_verify(&rec, &d->key, pl->buf))) {
        pl->status = 2;
        return;
    }
    kvt_disk_read *r = pl->req;
    if (!kvt_hash128_eq(rec.ns, d->p.ns) || !kvt_hash128_eq(rec.hash, r->hash) ||
        !kvt_hash128_eq(rec.parent, r->parent) || rec.block_tokens != d->p.block_tokens ||
        rec.payload_bytes != d->p.payload_bytes || memcmp(rec.tokens, r->tokens, d->p.block_tokens * sizeof(int32_t))) {
        pl->status = 1;
        return;
    }
    pl->status = decode_with(d->zd, &rec, r->out, d->p.payload_bytes) ? 2 : 0;
}

static void extent_done(void *ctx, kvt_dio_req *rq) {
    kvt_disk *d = ((read_ctx *)ctx)->d;
    disk_extent *e = rq->user;
    for (size_t i = 0; i < e->count; i++) {
        disk_plan *pl = e->plans[e->first + i];
        ssize_t rel = (ssize_t)(pl->off - e->plans[e->first]->off);
        ssize_t got = rq->res < 0 ? rq->res : rq->res > rel ? KVT_MIN(rq->res - rel, (ssize_t)pl->bytes) : 0;
        finish_plan(d, pl, got);
    }
}

size_t kvt_disk_get_many(kvt_disk *d, kvt_disk_read *reqs, size_t n) {
    if (!n) return 0;
    disk_plan *plans = kvt_xcalloc(n, sizeof *plans);
    disk_plan **order = kvt_xcalloc(n, sizeof *order);
    size_t np = 0;
    pthread_mutex_lock(&d->mu);
    apply_events_locked(d);
    for (size_t i = 0; i < n; i++) reqs[i].result = KVT_ENOTFOUND;
    size_t queue_hits = read_queued(d, reqs, n);
    for (size_t i = 0; i < n; i++) {
        if (reqs[i].result == 0) continue;
        uint32_t slot;
        if (!kvt_hmap128_get(&d->map, reqs[i].hash, &slot) || !d->recs[slot].seg) continue;
        disk_rec *r = &d->recs[slot];
        disk_plan *pl = &plans[np];
        *pl = (disk_plan){&reqs[i], slot, r->seg, r->off, r->bytes, NULL, 2};
        r->seg->refs++; /* the file stays open until this read is done */
        order[np++] = pl;
    }
    pthread_mutex_unlock(&d->mu);

    qsort(order, np, sizeof *order, plan_cmp);
    disk_extent *ext = kvt_xcalloc(np ? np : 1, sizeof *ext);
    kvt_dio_req *rq = kvt_xcalloc(np ? np : 1, sizeof *rq);
    size_t ne = 0, total = 0;
    for (size_t i = 0; i < np; i++) {
        disk_plan *pl = order[i];
        disk_extent *last = ne ? &ext[ne - 1] : NULL;
        disk_plan *prev = i ? order[i - 1] : NULL;
        if (last && prev->seg == pl->seg && prev->off + prev->bytes == pl->off &&
            rq[ne - 1].len + pl->bytes <= COALESCE_MAX) {
            last->count++;
            rq[ne - 1].len += pl->bytes;
        } else {
            ext[ne] = (disk_extent){order, i, 1};
            rq[ne] = (kvt_dio_req){pl->seg->fd, pl->off, pl->bytes, (void *)(uintptr_t)total, 0, &ext[ne]};
            ne++;
        }
        total += pl->bytes;
    }
    if (total > d->rbuf_cap) {
        free(d->rbuf);
        d->rbuf_cap = total;
        d->rbuf = aligned_buf(total);
    }
    for (size_t i = 0; i < ne; i++) {
        size_t at = (size_t)(uintptr_t)rq[i].buf;
        rq[i].buf = d->rbuf + at;
        for (size_t k = 0; k < ext[i].count; k++) {
            disk_plan *pl = order[ext[i].first + k];
            pl->buf = d->rbuf + at + (pl->off - rq[i].off);
        }
    }
    double t0 = kvt_now();
    read_ctx rc = {d};
    kvt_dio_read_batch(d->rio, rq, ne, extent_done, &rc);
    double dt = kvt_now() - t0;

    size_t hits = queue_hits;
    pthread_mutex_lock(&d->mu);
    d->st.read_seconds += dt;
    for (size_t i = 0; i < ne; i++)
        if (rq[i].res > 0) d->st.bytes_read += (uint64_t)rq[i].res;
    for (size_t i = 0; i < np; i++) {
        disk_plan *pl = &plans[i];
        disk_rec *r = &d->recs[pl->slot];
        int same = r->used && r->seg == pl->seg && r->off == pl->off;
        if (pl->status == 0) {
            pl->req->result = 0;
            hits++;
            if (same) r->hit = 1;
        } else if (pl->status >= 2) {
            if (pl->status == 2) d->st.corrupt++;
            else d->st.read_errors++;
            kvt_log(KVT_LOG_WARN, "disk tier %s: record at segment %016" PRIx64 " offset %" PRIu64 " is %s; dropped",
                    d->dir, pl->seg->id, pl->off, pl->status == 2 ? "corrupt" : "unreadable");
            if (same) rec_drop(d, pl->slot);
        }
        seg_unref(pl->seg);
    }
    d->st.hits += hits;
    d->st.misses += n - hits;
    apply_events_locked(d);
    pthread_mutex_unlock(&d->mu);
    free(ext);
    free(rq);
    free(order);
    free(plans);
    return hits;
}

int kvt_disk_get(kvt_disk *d, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, void *out) {
    kvt_disk_read r = {hash, parent, tokens, out, 0};
    kvt_disk_get_many(d, &r, 1);
    return r.result;
}

int kvt_disk_contains(kvt_disk *d, kvt_hash128 hash) {
    pthread_mutex_lock(&d->mu);
    apply_events_locked(d);
    int in = kvt_hmap128_get(&d->map, hash, NULL) || queued_slot(d, hash);
    pthread_mutex_unlock(&d->mu);
    return in;
}

int kvt_disk_remove(kvt_disk *d, kvt_hash128 hash) {
    pthread_mutex_lock(&d->mu);
    apply_events_locked(d);
    uint32_t slot;
    int rc = KVT_ENOTFOUND;
    disk_qslot *q = queued_slot(d, hash);
    if (kvt_hmap128_get(&d->map, hash, &slot)) {
        rec_drop(d, slot);
        d->st.removes++;
        rc = 0;
    } else if (q) {
        push_event(d, 0, hash, hash, 0, NULL);
        d->st.removes++;
        rc = 0;
    }
    if (q) q->cancelled = 1; /* the writer skips it */
    apply_events_locked(d);
    pthread_mutex_unlock(&d->mu);
    return rc;
}

void kvt_disk_pause_writer(kvt_disk *d, int paused) {
    pthread_mutex_lock(&d->mu);
    d->paused = paused;
    pthread_cond_broadcast(&d->cv_work);
    pthread_mutex_unlock(&d->mu);
}

int kvt_disk_flush(kvt_disk *d) {
    pthread_mutex_lock(&d->mu);
    d->paused = 0; /* a flush waits for the queue: it must drain */
    pthread_cond_broadcast(&d->cv_work);
    while (d->q_count) pthread_cond_wait(&d->cv_idle, &d->mu);
    apply_events_locked(d);
    int rc = d->write_err;
    pthread_mutex_unlock(&d->mu);
    /* the writer thread's own message is its thread's; say it again on the caller's */
    if (rc) kvt_fail(rc, "disk tier %s: a write failed (%s), so writes stopped; blocks not yet written are lost",
                     d->dir, kvt_strerror(rc));
    return rc;
}

void kvt_disk_get_stats(kvt_disk *d, kvt_disk_stats *out) {
    pthread_mutex_lock(&d->mu);
    apply_events_locked(d);
    *out = d->st;
    out->bytes_used = segs_bytes(d);
    out->records = d->map.count;
    out->segments = d->n_segs;
    out->queued = d->q_count;
    out->compression_ratio = d->st.stored_out ? (double)d->st.payload_in / (double)d->st.stored_out : 1.0;
    pthread_mutex_unlock(&d->mu);
}

/* ---- directory maintenance ---------------------------------------------- */

typedef struct {
    int (*fn)(void *ctx, const kvt_disk_walk_info *w);
    void *ctx;
    const char *segment;
    ZSTD_DCtx *zd;
    uint8_t *dec;
    size_t dec_cap;
    const mac_key *key; /* verify checks MACs under it (scan_segment refuses a bad one) */
} walk_ctx;

static int walk_scan_fn(void *ctx, uint64_t off, uint64_t bytes, int status, const kvt_disk_record *rec,
                        const uint8_t *raw) {
    walk_ctx *w = ctx;
    kvt_disk_walk_info info = {w->segment, off, bytes, status, *rec, KVT_DISK_MAC_NONE};
    if (status == 0 && raw) {
        kvt_disk_record full;
        kvt_disk_record_parse(raw, rec->record_bytes, 1, &full);
        if (w->dec_cap < full.payload_bytes) {
            free(w->dec);
            w->dec_cap = full.payload_bytes;
            w->dec = kvt_xmalloc(w->dec_cap);
        }
        if (decode_with(w->zd, &full, w->dec, w->dec_cap)) info.status = KVT_EFORMAT;
    }
    info.mac = !(rec->flags & KVT_DISK_FLAG_MAC)   ? KVT_DISK_MAC_NONE
               : raw && mac_checkable(w->key, rec) ? KVT_DISK_MAC_OK
                                                   : KVT_DISK_MAC_UNCHECKED;
    info.rec.tokens = NULL;
    info.rec.stored = NULL;
    info.rec.raw = NULL;
    return w->fn(w->ctx, &info);
}

int kvt_disk_walk(const char *dir, int verify, int (*fn)(void *ctx, const kvt_disk_walk_info *w), void *ctx) {
    int dfd = dir_open(dir, DIR_READ);
    if (dfd < 0) return dfd;
    uint64_t *ids;
    long n = list_segments(dfd, dir, 0, &ids);
    if (n < 0) {
        close(dfd);
        return kvt_fail((int)n, "cache dir %s: cannot list: %s", dir, strerror((int)-n));
    }
    /* verify checks MACs with the directory's key: its owner's, as the store would */
    mac_key key;
    int have_key = 0;
    struct stat db;
    if (verify && fstat(dfd, &db) == 0) {
        int krc = sodium_init() < 0 ? kvt_fail(KVT_EUNSUPPORTED, "libsodium cannot start") : 0;
        if (!krc) krc = key_read(dfd, dir, db.st_uid, &key);
        if (krc && krc != KVT_ENOTFOUND) {
            free(ids);
            close(dfd);
            return krc;
        }
        have_key = krc == 0;
    }
    uint8_t *buf = aligned_buf(SCAN_READ_BYTES), *vbuf = NULL;
    size_t vcap = 0;
    walk_ctx w = {fn, ctx, NULL, ZSTD_createDCtx(), NULL, 0, have_key ? &key : NULL};
    int rc = 0;
    for (long i = 0; i < n && !rc; i++) {
        char nm[SEG_NAME_MAX];
        seg_name(nm, sizeof nm, ids[i]);
        int fd = file_open(dfd, dir, nm, O_RDONLY, 0);
        struct stat sb;
        if (fd == -ENOENT) continue; /* reclaimed meanwhile */
        if (fd < 0) {                /* a link or a FIFO: skipped, never followed or waited on */
            kvt_log(KVT_LOG_WARN, "%s", kvt_errmsg());
            continue;
        }
        if (fstat(fd, &sb) == 0) {
            w.segment = nm;
            rc = scan_segment(fd, (uint64_t)sb.st_size, verify, w.key, buf, &vbuf, &vcap, walk_scan_fn, &w);
        }
        close(fd);
    }
    ZSTD_freeDCtx(w.zd);
    free(w.dec);
    free(buf);
    free(vbuf);
    free(ids);
    close(dfd);
    sodium_memzero(&key, sizeof key);
    return rc;
}

/* Copies the keepers of one segment to a temp file and renames it over the
 * segment (or removes the segment when nothing is kept). */
typedef struct {
    const kvt_hash128 *keep_ns;
    const mac_key *key; /* NULL without a key file: MAC'd records are kept unchecked */
    kvt_hmap128 *seen;
    kvt_disk_gc_report *rep;
    int out_fd;
    uint64_t out_bytes;
    int dropped, err;
} gc_ctx;

static int gc_scan_fn(void *ctx, uint64_t off, uint64_t bytes, int status, const kvt_disk_record *rec,
                      const uint8_t *raw) {
    gc_ctx *g = ctx;
    if (status == KVT_EUNSUPPORTED) {
        g->rep->dropped_foreign++;
        g->dropped = 1;
        return 0;
    }
    if (status) {
        g->rep->dropped_corrupt++;
        g->dropped = 1;
        return 0;
    }
    /* signed under a lost key: never usable again, like another namespace */
    if ((g->keep_ns && !kvt_hash128_eq(rec->ns, *g->keep_ns)) ||
        (g->key && (rec->flags & KVT_DISK_FLAG_MAC) && rec->key_id != g->key->id)) {
        g->rep->dropped_foreign++;
        g->dropped = 1;
        return 0;
    }
    if (kvt_hmap128_get(g->seen, rec->hash, NULL)) {
        g->rep->dropped_dup++;
        g->dropped = 1;
        return 0;
    }
    kvt_hmap128_put(g->seen, rec->hash, 1);
    g->rep->kept++;
    ssize_t w = pwrite(g->out_fd, raw, bytes, (off_t)g->out_bytes);
    if (w != (ssize_t)bytes) {
        g->err = w < 0 ? -errno : -EIO;
        return 1;
    }
    g->out_bytes += bytes;
    return 0;
}

int kvt_disk_compact(const char *dir, const kvt_hash128 *keep_ns, kvt_disk_gc_report *rep) {
    memset(rep, 0, sizeof *rep);
    int dfd = dir_open(dir, DIR_OWNED);
    if (dfd < 0) return dfd;
    int unlocked;
    int lock_fd = lock_dir(dfd, dir, &unlocked);
    if (lock_fd < 0) {
        close(dfd);
        return unlocked ? kvt_fail(-EROFS, "cache dir %s is read-only", dir) : lock_fd;
    }
    uint64_t *ids;
    long n = list_segments(dfd, dir, 0, &ids);
    if (n < 0) {
        close(lock_fd);
        close(dfd);
        return kvt_fail((int)n, "cache dir %s: cannot list: %s", dir, strerror((int)-n));
    }
    /* with the key, a record whose MAC fails is dropped as corrupt; without
     * one, MAC'd records are kept (the key may come back from a backup) */
    mac_key key;
    int krc = sodium_init() < 0 ? kvt_fail(KVT_EUNSUPPORTED, "libsodium cannot start") : 0;
    if (!krc) krc = key_read(dfd, dir, geteuid(), &key);
    if (krc && krc != KVT_ENOTFOUND) {
        free(ids);
        close(lock_fd);
        close(dfd);
        return krc;
    }
    kvt_hmap128 seen;
    kvt_hmap128_init(&seen);
    uint8_t *buf = aligned_buf(SCAN_READ_BYTES), *vbuf = NULL;
    size_t vcap = 0;
    int rc = 0;
    /* newest first, so the copy a reinsertion wrote last is the one kept */
    for (long i = n - 1; i >= 0 && !rc; i--) {
        char nm[SEG_NAME_MAX], tmp[TMP_NAME_MAX];
        seg_name(nm, sizeof nm, ids[i]);
        snprintf(tmp, sizeof tmp, "%s%s", nm, TMP_SUFFIX);
        int fd = file_open(dfd, dir, nm, O_RDONLY, 0);
        if (fd == -ELOOP || fd == -EINVAL) { /* not a segment we wrote: leave it alone */
            kvt_log(KVT_LOG_WARN, "%s", kvt_errmsg());
            continue;
        }
        struct stat sb;
        if (fd < 0 || fstat(fd, &sb)) {
            rc = fd < 0 ? fd : -errno;
            if (fd >= 0) close(fd);
            break;
        }
        rep->bytes_before += (uint64_t)sb.st_size;
        int out = tmp_create(dfd, dir, tmp, 0);
        if (out < 0) {
            rc = out;
            close(fd);
            break;
        }
        gc_ctx g = {keep_ns, krc ? NULL : &key, &seen, rep, out, 0, 0, 0};
        scan_segment(fd, (uint64_t)sb.st_size, 1, g.key, buf, &vbuf, &vcap, gc_scan_fn, &g);
        close(fd);
        if (!g.err && g.out_bytes && g.out_bytes != (uint64_t)sb.st_size) g.dropped = 1;
        if (!g.err && g.dropped && g.out_bytes && fsync(out)) g.err = -errno;
        close(out);
        if (g.err) {
            unlinkat(dfd, tmp, 0);
            rc = kvt_fail(g.err, "cache dir %s: rewriting %s: %s", dir, nm, strerror(-g.err));
        } else if (!g.dropped) {
            unlinkat(dfd, tmp, 0);
            rep->bytes_after += (uint64_t)sb.st_size;
        } else if (!g.out_bytes) {
            unlinkat(dfd, tmp, 0);
            unlinkat(dfd, nm, 0);
        } else if (renameat(dfd, tmp, dfd, nm)) {
            rc = -errno;
            unlinkat(dfd, tmp, 0);
        } else {
            rep->bytes_after += g.out_bytes;
        }
    }
    fsync(dfd);
    kvt_hmap128_free(&seen);
    free(buf);
    free(vbuf);
    free(ids);
    close(lock_fd);
    close(dfd);
    sodium_memzero(&key, sizeof key);
    return rc;
}

int kvt_disk_clear(const char *dir, uint64_t *removed) {
    if (removed) *removed = 0;
    int dfd = dir_open(dir, DIR_OWNED);
    if (dfd < 0) return dfd;
    int unlocked;
    int lock_fd = lock_dir(dfd, dir, &unlocked);
    if (lock_fd < 0) {
        close(dfd);
        return unlocked ? kvt_fail(-EROFS, "cache dir %s is read-only", dir) : lock_fd;
    }
    DIR *dh = dir_list(dfd);
    if (!dh) {
        int e = errno;
        close(lock_fd);
        close(dfd);
        return kvt_fail(-e, "cache dir %s: cannot list: %s", dir, strerror(e));
    }
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(dh))) {
        uint64_t id;
        size_t len = strlen(e->d_name), lt = strlen(TMP_SUFFIX);
        int tmp = len > lt && !strcmp(e->d_name + len - lt, TMP_SUFFIX) &&
                  !strncmp(e->d_name, SEG_PREFIX, strlen(SEG_PREFIX));
        if (!parse_seg_name(e->d_name, &id) && !tmp) continue;
        /* unlinkat removes a link planted under a segment's name, not its target */
        struct stat sb;
        uint64_t sz = fstatat(dfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode)
                          ? (uint64_t)sb.st_size : 0;
        if (unlinkat(dfd, e->d_name, 0)) rc = kvt_fail(-errno, "cannot remove %s/%s: %s", dir, e->d_name, strerror(errno));
        else if (removed) *removed += sz;
    }
    closedir(dh);
    fsync(dfd);
    close(lock_fd);
    close(dfd);
    return rc;
}

/* ---- the tier interface (tier.h) ---- */

static int ops_put(void *t, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, const void *payload) {
    return kvt_disk_put(t, hash, parent, tokens, payload);
}
static size_t ops_get_many(void *t, kvt_tier_read *reqs, size_t n) { return kvt_disk_get_many(t, reqs, n); }
static int ops_contains(void *t, kvt_hash128 hash) { return kvt_disk_contains(t, hash); }
static int ops_remove(void *t, kvt_hash128 hash) { return kvt_disk_remove(t, hash); }
static int ops_flush(void *t) { return kvt_disk_flush(t); }

static void ops_stats(void *t, kvt_tier_stats *out) {
    kvt_disk_stats ds;
    kvt_disk_get_stats(t, &ds);
    *out = (kvt_tier_stats){.blocks = ds.records, .bytes_used = ds.bytes_used, .budget_bytes = ds.budget_bytes,
                            .block_cost = ((kvt_disk *)t)->rec_max,
                            .hits = ds.hits, .misses = ds.misses, .puts = ds.puts, .evictions = ds.evicted,
                            .dropped = ds.dropped};
}

const kvt_tier_ops kvt_disk_tier_ops = {
    .name = "T2 disk", .persistent = 1, .measured = 1, .put = ops_put, .get_many = ops_get_many,
    .contains = ops_contains, .remove = ops_remove, .flush = ops_flush, .stats = ops_stats,
};
