// SPDX-License-Identifier: MIT
/* The remote tier's value codec (remote_internal.h): a block's Redis key,
 * and its value, the disk record of the block (tier_disk.h) without its
 * padding, raw or with a zstd payload, signed under the shared key. Encoding
 * runs on the writer thread, checking on get_many's reader threads. */
#include "remote_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common.h"

void kvt_remote_key(kvt_hash128 ns, kvt_hash128 hash, char out[KVT_REMOTE_KEY_LEN + 1]) {
    snprintf(out, KVT_REMOTE_KEY_LEN + 1, KVT_REMOTE_KEY_PREFIX "%016" PRIx64 "%016" PRIx64 ":%016" PRIx64 "%016" PRIx64,
             ns.hi, ns.lo, hash.hi, hash.lo);
}

int kvt_remote_value_accept(const kvt_remote *r, ZSTD_DCtx **dctx, uint8_t *value, size_t len,
                            const kvt_tier_read *req) {
    kvt_disk_record rec;
    if (kvt_disk_record_parse(value, len, 1, &rec)) return -1; /* header and payload CRCs */
    if (rec.header_bytes + rec.stored_bytes != len || rec.block_tokens != r->p.block_tokens ||
        rec.payload_bytes != r->p.payload_bytes || !kvt_hash128_eq(rec.ns, r->p.ns) ||
        !kvt_hash128_eq(rec.hash, req->hash) || !kvt_hash128_eq(rec.parent, req->parent) ||
        memcmp(rec.tokens, req->tokens, r->p.block_tokens * sizeof(int32_t)))
        return -1;
    if (kvt_disk_record_verify_in_place(&rec, r->key, value)) return -1;
    if (rec.codec != KVT_DISK_CODEC_RAW && !*dctx && !(*dctx = ZSTD_createDCtx())) return -1;
    return kvt_disk_record_decode_with(*dctx, &rec, req->out, r->p.payload_bytes) ? -1 : 0;
}

const uint8_t *kvt_remote_value_encode(kvt_remote *r, kvt_remote_qslot *q, uint8_t *zbuf, size_t *len) {
    size_t hb = r->header_bytes, pb = r->p.payload_bytes;
    if (r->p.compress == KVT_REMOTE_COMPRESS_ZSTD && zbuf && (r->cctx || (r->cctx = ZSTD_createCCtx()))) {
        /* room for the record minus one byte: a payload that does not shrink is stored raw */
        size_t n = ZSTD_compressCCtx(r->cctx, zbuf + hb, pb - 1, q->buf + hb, pb, r->p.zstd_level);
        if (!ZSTD_isError(n)) {
            memcpy(zbuf + KVT_DISK_HEADER_FIXED, q->buf + KVT_DISK_HEADER_FIXED, hb - KVT_DISK_HEADER_FIXED);
            kvt_disk_record_sign(zbuf, r->p.block_tokens, KVT_DISK_CODEC_ZSTD, pb, n, r->p.ns, q->hash, q->parent,
                                 r->key);
            *len = hb + n;
            return zbuf;
        }
    }
    /* raw, in place: the MAC pass writes only header bytes, which get_many never reads from a slot */
    kvt_disk_record_sign(q->buf, r->p.block_tokens, KVT_DISK_CODEC_RAW, pb, pb, r->p.ns, q->hash, q->parent, r->key);
    *len = hb + pb;
    return q->buf;
}
