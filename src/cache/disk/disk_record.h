// SPDX-License-Identifier: MIT
/* The self-verifying block record of tier_disk.h ("Record", "MAC") as a codec
 * of its own, for tiers that keep records somewhere other than a segment file:
 * the remote tier (tier_remote.h) stores one record per Redis value. Parsing,
 * decoding and MAC checks are declared in tier_disk.h; this adds the writing
 * side. The format, its version and its MAC stay defined in one place,
 * disk_record.c, so a record means the same thing in every tier.
 *
 * Thread-safety: every function is pure (reads and writes only its arguments). */
#ifndef KVT_DISK_RECORD_H
#define KVT_DISK_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include <zstd.h>

#include "blockhash.h"
#include "tier_disk.h"

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

#endif
