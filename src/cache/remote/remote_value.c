// SPDX-License-Identifier: MIT
/* The remote tier's value codec (remote_internal.h): a block's Redis key,
 * and its value, the disk record of the block (tier_disk.h) without its
 * padding, raw or with a zstd payload, signed under the shared key. Encoding
 * runs on the writer thread, checking on get_many's reader threads, which
 * read a raw value's payload from the socket in pieces, each checked and
 * copied out while it is still in cache. */
#include "remote_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "crc32c.h"

void kvt_remote_key(kvt_hash128 ns, kvt_hash128 hash, char out[KVT_REMOTE_KEY_LEN + 1]) {
    snprintf(out, KVT_REMOTE_KEY_LEN + 1, KVT_REMOTE_KEY_PREFIX "%016" PRIx64 "%016" PRIx64 ":%016" PRIx64 "%016" PRIx64,
             ns.hi, ns.lo, hash.hi, hash.lo);
}

/* Payload bytes taken from the socket, added to the CRC and copied out at a
 * time, at most: a piece is still in the core's cache (L2) for our two
 * passes over it, and few enough pieces keep the receive calls few. */
#define VALUE_PIECE (256u << 10)

/* Parses value[0..hlen) (the header alone, or with hlen == len the whole
 * value, then the payload CRC too) and checks it against the block req asks
 * for: len bytes in all, our block size, payload size and namespace, and
 * exactly req's key, parent and tokens. 0 or -1. */
static int header_matches(const kvt_remote *r, const uint8_t *value, size_t hlen, size_t len, const kvt_tier_read *req,
                          kvt_disk_record *rec) {
    if (kvt_disk_record_parse(value, hlen, hlen == len, rec)) return -1;
    if (rec->header_bytes + rec->stored_bytes != len || rec->block_tokens != r->p.block_tokens ||
        rec->payload_bytes != r->p.payload_bytes || !kvt_hash128_eq(rec->ns, r->p.ns) ||
        !kvt_hash128_eq(rec->hash, req->hash) || !kvt_hash128_eq(rec->parent, req->parent) ||
        memcmp(rec->tokens, req->tokens, r->p.block_tokens * sizeof(int32_t)))
        return -1;
    return 0;
}

int kvt_remote_value_accept(const kvt_remote *r, ZSTD_DCtx **dctx, uint8_t *value, size_t len,
                            const kvt_tier_read *req) {
    kvt_disk_record rec;
    if (header_matches(r, value, len, len, req, &rec) || kvt_disk_record_verify_in_place(&rec, r->key, value))
        return -1;
    if (rec.codec != KVT_DISK_CODEC_RAW && !*dctx && !(*dctx = ZSTD_createDCtx())) return -1;
    return kvt_disk_record_decode_with(*dctx, &rec, req->out, r->p.payload_bytes) ? -1 : 0;
}

/* n bytes of the value on k into dst. 0, or -1 (the connection is gone). */
static int read_into(kvt_remote *r, kvt_remote_conn *k, kvt_remote_inbuf *in, double deadline, uint8_t *dst, size_t n) {
    for (size_t got = 0, m; got < n; got += m)
        if (!(m = kvt_remote_bulk_some(r, k, in, deadline, dst + got, n - got))) return -1;
    return 0;
}

/* The payload of a raw value whose header (in v) matched rec: read piece by
 * piece after the header, each piece added to the CRC and copied to out
 * while still in cache, then the CRC and the MAC over all of v checked. out
 * is written before the MAC is known: a refused value leaves it undefined,
 * which a miss allows (tier.h). 1 accepted, 0 refused, -1 connection gone. */
static int stream_raw(kvt_remote *r, kvt_remote_conn *k, kvt_remote_reader *rd, double deadline, kvt_disk_record *rec,
                      uint8_t *out) {
    uint8_t *v = rd->value;
    size_t hb = rec->header_bytes, n = hb + rec->stored_bytes;
    uint32_t crc = rec->header_crc; /* the payload CRC runs on from the header's */
    size_t got = hb;
    for (size_t m; got < n; got += m) {
        if (!(m = kvt_remote_bulk_some(r, k, &rd->in, deadline, v + got, KVT_MIN(n - got, VALUE_PIECE)))) break;
        crc = kvt_crc32c(crc, v + got, m);
        memcpy(out + (got - hb), v + got, m);
    }
    if (got < n || kvt_remote_bulk_end(r, k, &rd->in, deadline, 0)) return -1;
    if (crc != rec->crc) return 0;
    rec->stored = v + hb;
    return !kvt_disk_record_verify_in_place(rec, r->key, v);
}

int kvt_remote_read_value(kvt_remote *r, kvt_remote_conn *k, kvt_remote_reader *rd, double deadline, kvt_tier_read *req,
                          size_t *len, int *ok) {
    *ok = 0;
    int rc = kvt_remote_bulk_head(r, k, &rd->in, deadline, len);
    if (rc != KVT_BULK_VALUE) return rc;
    size_t n = *len, hb = KVT_MIN(n, r->header_bytes);
    if (n > r->value_bytes) /* longer than any value of ours: dropped unread */
        return kvt_remote_bulk_end(r, k, &rd->in, deadline, n) ? KVT_BULK_FAILED : KVT_BULK_TOO_LONG;
    if (read_into(r, k, &rd->in, deadline, rd->value, hb)) return KVT_BULK_FAILED;
    kvt_disk_record rec;
    if (n == r->value_bytes && !header_matches(r, rd->value, hb, n, req, &rec) && rec.codec == KVT_DISK_CODEC_RAW) {
        int got = stream_raw(r, k, rd, deadline, &rec, req->out);
        *ok = got == 1;
        return got < 0 ? KVT_BULK_FAILED : KVT_BULK_VALUE;
    }
    /* anything else (compressed, or refused by its header) is read whole and checked as it stands */
    if (read_into(r, k, &rd->in, deadline, rd->value + hb, n - hb) || kvt_remote_bulk_end(r, k, &rd->in, deadline, 0))
        return KVT_BULK_FAILED;
    *ok = !kvt_remote_value_accept(r, &rd->dctx, rd->value, n, req);
    return KVT_BULK_VALUE;
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
