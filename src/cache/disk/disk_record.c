// SPDX-License-Identifier: MIT
/* The disk record format (tier_disk.h "Record", "MAC"): the header's fields,
 * its CRCs, the directory key's MAC schemes, and the parse, decode, check and
 * encode of one record. Pure functions over buffers: the files are elsewhere
 * (disk_dir.c), and the other tiers write records through tier_disk.h's
 * "records for other tiers". */
#include "disk_internal.h"

#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>
#include <zstd.h>

#include "common.h"
#include "crc32c.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the disk record format is little-endian; add byte swapping for this target"
#endif

static_assert(RH_FLAGS == RH_CRC + 4 && RH_MAC == RH_KEY_ID + 4, "record header layout");
static_assert(RH_TOKENS == RH_MAC + KVT_DISK_MAC_BYTES, "record header layout");
static_assert(KVT_DISK_MAC_BYTES >= crypto_generichash_BYTES_MIN && KVT_DISK_MAC_BYTES <= crypto_generichash_BYTES_MAX,
              "MAC length BLAKE2b can produce");
static_assert(KVT_DISK_KEY_BYTES >= crypto_generichash_KEYBYTES_MIN &&
                  KVT_DISK_KEY_BYTES <= crypto_generichash_KEYBYTES_MAX,
              "key length BLAKE2b accepts");
static_assert(KVT_DISK_GMAC_TAG_BYTES == crypto_aead_aes256gcm_ABYTES &&
                  KVT_DISK_GMAC_NONCE_BYTES == crypto_aead_aes256gcm_NPUBBYTES &&
                  KVT_DISK_GMAC_TAG_BYTES + KVT_DISK_GMAC_NONCE_BYTES <= KVT_DISK_MAC_BYTES,
              "GMAC's tag and nonce fit the MAC field");
static_assert(crypto_aead_aes256gcm_KEYBYTES >= crypto_generichash_BYTES_MIN &&
                  crypto_aead_aes256gcm_KEYBYTES <= crypto_generichash_BYTES_MAX,
              "BLAKE2b can derive an AES-256 key");

/* CRC of a header with its two CRC fields taken as zero. */
static uint32_t header_crc(const uint8_t *h, uint32_t header_bytes) {
    static const uint8_t zeros[RH_CRC_FIELDS_BYTES];
    uint32_t c = kvt_crc32c(0, h, RH_HEADER_CRC);
    c = kvt_crc32c(c, zeros, sizeof zeros);
    return kvt_crc32c(c, h + RH_FLAGS, header_bytes - RH_FLAGS);
}

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

#define KEY_ID_CONTEXT "kvtier disk key id"
#define GMAC_KEY_CONTEXT "kvtier disk aes-256-gcm key"

/* Fills in k's id and, where GMAC is computed, its AES key: the directory
 * key's BLAKE2b of a domain-separation string, so the raw key never serves
 * two algorithms. k->bytes is set. */
void kvt_disk_key_prepare(mac_key *k) {
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

/* The MAC field of msg[0..len) under scheme (usable with k), the one place
 * both schemes are computed: keyed BLAKE2b-256 under the key itself, or GMAC
 * (AES-256-GCM with msg as additional data and an empty message) under the
 * derived AES key with nonce, which goes into the field after the tag. */
static void bytes_mac(const mac_key *k, uint32_t scheme, const uint8_t *msg, uint64_t len,
                      const uint8_t nonce[KVT_DISK_GMAC_NONCE_BYTES], uint8_t out[KVT_DISK_MAC_BYTES]) {
    memset(out, 0, KVT_DISK_MAC_BYTES);
    if (scheme == KVT_DISK_SCHEME_BLAKE2B) {
        crypto_generichash(out, KVT_DISK_MAC_BYTES, msg, len, k->bytes, KVT_DISK_KEY_BYTES);
        return;
    }
    assert(scheme == KVT_DISK_SCHEME_GMAC && k->gmac);
    uint8_t empty = 0;
    crypto_aead_aes256gcm_encrypt_detached_afternm(&empty, out, NULL, &empty, 0, msg, len, NULL, nonce, &k->gcm);
    memcpy(out + KVT_DISK_GMAC_TAG_BYTES, nonce, KVT_DISK_GMAC_NONCE_BYTES);
}

/* The MAC field of the record rec[0..len) (header and stored payload) under
 * scheme (usable with k): the MAC covers every byte, with the two CRC fields
 * and the MAC field read as zero, so magic, version, codec, lengths,
 * namespace, hash, parent, flags, key id and token ids are all bound. A
 * record can then only be made by whoever holds the key, and a payload moved
 * under another key, parent or token list no longer matches. The MAC is
 * taken over one buffer, so those fields are zeroed in rec while it runs and
 * then restored: rec is unchanged on return, but must not be read by another
 * thread meanwhile (it never is: see the callers). nonce is GMAC's. out may
 * point into rec. */
static void record_mac(const mac_key *k, uint32_t scheme, uint8_t *rec, uint64_t len,
                       const uint8_t nonce[KVT_DISK_GMAC_NONCE_BYTES], uint8_t out[KVT_DISK_MAC_BYTES]) {
    uint8_t crcs[RH_CRC_FIELDS_BYTES], field[KVT_DISK_MAC_BYTES], mac[KVT_DISK_MAC_BYTES];
    memcpy(crcs, rec + RH_HEADER_CRC, sizeof crcs);
    memcpy(field, rec + RH_MAC, sizeof field);
    memset(rec + RH_HEADER_CRC, 0, sizeof crcs);
    memset(rec + RH_MAC, 0, sizeof field);
    bytes_mac(k, scheme, rec, len, nonce, mac);
    memcpy(rec + RH_HEADER_CRC, crcs, sizeof crcs);
    memcpy(rec + RH_MAC, field, sizeof field);
    memcpy(out, mac, KVT_DISK_MAC_BYTES);
}

/* Checks a fully parsed record's MAC under k, in constant time. buf is the
 * record's bytes (r->raw), writable for record_mac. Returns 0, KVT_EFORMAT
 * (no MAC, or a mismatch) or KVT_EUNSUPPORTED (a scheme not computed here). */
int kvt_disk_record_verify(const kvt_disk_record *r, const mac_key *k, uint8_t *buf) {
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
int kvt_disk_mac_checkable(const mac_key *k, const kvt_disk_record *r) {
    return k && (r->flags & KVT_DISK_FLAG_MAC) && r->key_id == k->id && scheme_usable(k, r->mac_scheme);
}

/* ---- record format ----------------------------------------------------- */

int kvt_disk_record_parse(const void *buf, size_t len, int full, kvt_disk_record *out) {
    const uint8_t *b = buf;
    memset(out, 0, sizeof *out);
    if (len < KVT_DISK_HEADER_FIXED || disk_rd32(b + RH_MAGIC) != KVT_DISK_MAGIC)
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
    out->header_bytes = disk_rd32(b + RH_HEADER_BYTES);
    out->block_tokens = disk_rd32(b + RH_BLOCK_TOKENS);
    out->payload_bytes = disk_rd64(b + RH_PAYLOAD_BYTES);
    out->stored_bytes = disk_rd64(b + RH_STORED_BYTES);
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
    out->header_crc = disk_rd32(b + RH_HEADER_CRC);
    out->crc = disk_rd32(b + RH_CRC);
    uint32_t hc = header_crc(b, out->header_bytes);
    if (hc != out->header_crc) return kvt_fail(KVT_EFORMAT, "record header CRC mismatch");
    out->flags = disk_rd32(b + RH_FLAGS);
    out->key_id = disk_rd32(b + RH_KEY_ID);
    out->mac_scheme = (out->flags & KVT_DISK_FLAG_SCHEME_MASK) >> KVT_DISK_FLAG_SCHEME_SHIFT;
    if ((out->flags & ~(KVT_DISK_FLAG_MAC | KVT_DISK_FLAG_SCHEME_MASK)) ||
        (!(out->flags & KVT_DISK_FLAG_MAC) && (out->key_id || out->mac_scheme)))
        return kvt_fail(KVT_EFORMAT, "record header: unknown flags %08x, or a key id or scheme without a MAC",
                        out->flags);
    memcpy(out->mac, b + RH_MAC, KVT_DISK_MAC_BYTES);
    out->raw = b;
    out->record_bytes = kvt_disk_align_up(out->header_bytes + out->stored_bytes);
    out->ns = disk_rdh(b + RH_NS);
    out->hash = disk_rdh(b + RH_HASH);
    out->parent = disk_rdh(b + RH_PARENT);
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

int kvt_disk_decode_with(ZSTD_DCtx *dc, const kvt_disk_record *r, void *out, size_t cap) {
    if (!r->stored) return kvt_fail(KVT_EARG, "record payload not parsed");
    if (cap < r->payload_bytes)
        return kvt_fail(KVT_ELIMIT, "payload of %" PRIu64 " bytes > %zu", r->payload_bytes, cap);
    if (r->codec == KVT_DISK_CODEC_RAW) {
        memcpy(out, r->stored, r->payload_bytes);
        return 0;
    }
    size_t n = dc ? ZSTD_decompressDCtx(dc, out, r->payload_bytes, r->stored, r->stored_bytes)
                  : ZSTD_decompress(out, r->payload_bytes, r->stored, r->stored_bytes);
    if (ZSTD_isError(n) || n != r->payload_bytes) return kvt_fail(KVT_EFORMAT, "zstd payload does not decode");
    return 0;
}

int kvt_disk_record_decode(const kvt_disk_record *r, void *out, size_t cap) {
    return kvt_disk_decode_with(NULL, r, out, cap);
}

int kvt_disk_record_check_mac(const kvt_disk_record *r, const uint8_t key[KVT_DISK_KEY_BYTES]) {
    if (!r->raw || !r->stored) return kvt_fail(KVT_EARG, "record payload not parsed");
    if (!(r->flags & KVT_DISK_FLAG_MAC)) return kvt_fail(KVT_EFORMAT, "record carries no MAC");
    mac_key k;
    memcpy(k.bytes, key, KVT_DISK_KEY_BYTES);
    kvt_disk_key_prepare(&k);
    /* a copy: GMAC works in place, and the caller's buffer may be read-only */
    size_t len = r->header_bytes + r->stored_bytes;
    uint8_t *copy = kvt_xmalloc(len);
    memcpy(copy, r->raw, len);
    kvt_disk_record c = *r;
    c.raw = copy;
    c.stored = copy + r->header_bytes;
    c.tokens = (const int32_t *)(const void *)(copy + RH_TOKENS);
    int rc = kvt_disk_record_verify(&c, &k, copy);
    free(copy);
    sodium_memzero(&k, sizeof k);
    return rc;
}

/* Writes a record header into h (header_bytes) for a stored payload at
 * h + header_bytes, its MAC under key (none when key is NULL; GMAC where key
 * computes it, with a fresh random nonce, else BLAKE2b), and both CRCs.
 * Returns the padded record length; zeroes the padding. */
uint64_t kvt_disk_encode_with(uint8_t *h, uint32_t B, kvt_disk_codec codec, uint64_t payload_bytes,
                              uint64_t stored_bytes, kvt_hash128 ns, kvt_hash128 hash, kvt_hash128 parent,
                              const mac_key *key) {
    uint32_t header_bytes = KVT_DISK_HEADER_FIXED + 4 * B;
    disk_wr32(h + RH_MAGIC, KVT_DISK_MAGIC);
    disk_wr16(h + RH_VERSION, KVT_DISK_FORMAT_VERSION);
    disk_wr16(h + RH_CODEC, (uint16_t)codec);
    disk_wr32(h + RH_HEADER_BYTES, header_bytes);
    disk_wr32(h + RH_BLOCK_TOKENS, B);
    disk_wr64(h + RH_PAYLOAD_BYTES, payload_bytes);
    disk_wr64(h + RH_STORED_BYTES, stored_bytes);
    disk_wrh(h + RH_NS, ns);
    disk_wrh(h + RH_HASH, hash);
    disk_wrh(h + RH_PARENT, parent);
    uint32_t scheme = key && key->gmac ? KVT_DISK_SCHEME_GMAC : KVT_DISK_SCHEME_BLAKE2B;
    disk_wr32(h + RH_FLAGS, key ? KVT_DISK_FLAG_MAC | scheme << KVT_DISK_FLAG_SCHEME_SHIFT : 0);
    disk_wr32(h + RH_KEY_ID, key ? key->id : 0);
    memset(h + RH_MAC, 0, KVT_DISK_MAC_BYTES);
    if (key) {
        /* a GCM nonce must never repeat under one key: 96 random bits per record (tier_disk.h, "MAC") */
        uint8_t nonce[KVT_DISK_GMAC_NONCE_BYTES] = {0};
        if (scheme == KVT_DISK_SCHEME_GMAC) randombytes_buf(nonce, sizeof nonce);
        record_mac(key, scheme, h, header_bytes + stored_bytes, nonce, h + RH_MAC);
    }
    uint32_t hc = header_crc(h, header_bytes);
    disk_wr32(h + RH_HEADER_CRC, hc);
    disk_wr32(h + RH_CRC, kvt_crc32c(hc, h + header_bytes, stored_bytes));
    uint64_t total = kvt_disk_align_up(header_bytes + stored_bytes);
    memset(h + header_bytes + stored_bytes, 0, total - header_bytes - stored_bytes);
    return total;
}

/* The writing side for other tiers (tier_disk.h): the same encoder, with
 * the key passed as bytes. */
uint32_t kvt_disk_record_key_id(const uint8_t key[KVT_DISK_KEY_BYTES]) {
    mac_key k;
    memcpy(k.bytes, key, KVT_DISK_KEY_BYTES);
    kvt_disk_key_prepare(&k);
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
        kvt_disk_key_prepare(&k); /* the scheme this machine signs with, as the disk tier does */
        k.id = key_id;
    }
    uint64_t n = kvt_disk_encode_with(rec, B, codec, payload_bytes, stored_bytes, ns, hash, parent, key ? &k : NULL);
    if (key) sodium_memzero(&k, sizeof k);
    return n;
}

/* ---- prepared keys (tier_disk.h) ----------------------------------------- */

struct kvt_disk_record_key {
    mac_key k;
};

kvt_disk_record_key *kvt_disk_record_key_new(const uint8_t key[KVT_DISK_KEY_BYTES]) {
    kvt_disk_record_key *k = kvt_xcalloc(1, sizeof *k);
    memcpy(k->k.bytes, key, KVT_DISK_KEY_BYTES);
    kvt_disk_key_prepare(&k->k);
    return k;
}

void kvt_disk_record_key_free(kvt_disk_record_key *k) {
    if (!k) return;
    sodium_memzero(k, sizeof *k);
    free(k);
}

uint64_t kvt_disk_record_sign(uint8_t *rec, uint32_t B, kvt_disk_codec codec, uint64_t payload_bytes,
                              uint64_t stored_bytes, kvt_hash128 ns, kvt_hash128 hash, kvt_hash128 parent,
                              const kvt_disk_record_key *k) {
    return kvt_disk_encode_with(rec, B, codec, payload_bytes, stored_bytes, ns, hash, parent, k ? &k->k : NULL);
}

int kvt_disk_record_verify_in_place(const kvt_disk_record *r, const kvt_disk_record_key *k, uint8_t *buf) {
    if (!r->raw || !r->stored) return kvt_fail(KVT_EARG, "record payload not parsed");
    return kvt_disk_record_verify(r, &k->k, buf);
}

int kvt_disk_record_decode_with(ZSTD_DCtx *dc, const kvt_disk_record *r, void *out, size_t cap) {
    return kvt_disk_decode_with(dc, r, out, cap);
}

/* ---- side files' MACs (tier_disk.h) -------------------------------------- */

uint32_t kvt_disk_key_scheme(const kvt_disk_record_key *k) {
    return k->k.gmac ? KVT_DISK_SCHEME_GMAC : KVT_DISK_SCHEME_BLAKE2B;
}

uint32_t kvt_disk_key_ident(const kvt_disk_record_key *k) { return k->k.id; }

void kvt_disk_mac(const kvt_disk_record_key *k, const uint8_t *msg, size_t n, uint8_t field[KVT_DISK_MAC_BYTES]) {
    uint32_t scheme = kvt_disk_key_scheme(k);
    uint8_t nonce[KVT_DISK_GMAC_NONCE_BYTES] = {0};
    if (scheme == KVT_DISK_SCHEME_GMAC) randombytes_buf(nonce, sizeof nonce); /* never repeated: see "MAC" */
    bytes_mac(&k->k, scheme, msg, n, nonce, field);
}

int kvt_disk_mac_check(const kvt_disk_record_key *k, uint32_t scheme, const uint8_t *msg, size_t n,
                       const uint8_t field[KVT_DISK_MAC_BYTES]) {
    if (!scheme_usable(&k->k, scheme))
        return kvt_fail(KVT_EUNSUPPORTED, "MAC scheme %u cannot be computed here", scheme);
    uint8_t mac[KVT_DISK_MAC_BYTES];
    bytes_mac(&k->k, scheme, msg, n, field + KVT_DISK_GMAC_TAG_BYTES, mac);
    if (sodium_memcmp(mac, field, KVT_DISK_MAC_BYTES))
        return kvt_fail(KVT_EFORMAT, "MAC mismatch: altered, or signed under another key");
    return 0;
}
