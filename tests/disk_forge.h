// SPDX-License-Identifier: MIT
/* Test helper: tampers with disk-tier records the way an attacker without the
 * directory's key can: change a record's stored payload
 * or header fields (flags, MAC scheme, GMAC nonce), then recompute both
 * CRC32Cs from the layout documented in tier_disk.h, so every CRC check
 * passes and only the keyed MAC can tell. Header-only, for the tests that
 * need it. */
#ifndef KVT_TEST_DISK_FORGE_H
#define KVT_TEST_DISK_FORGE_H

#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crc32c.h"
#include "tier_disk.h"

/* Record header offsets from tier_disk.h's layout. */
#define FORGE_HEADER_CRC 80
#define FORGE_RECORD_CRC 84
#define FORGE_AFTER_CRCS 88
#define FORGE_FLAGS 88
#define FORGE_KEY_ID 92
#define FORGE_MAC 96
#define FORGE_NONCE (FORGE_MAC + KVT_DISK_GMAC_TAG_BYTES) /* GMAC's nonce, after its tag */

/* Rewrites both CRCs of the record in rec[0..header_bytes + stored_bytes). */
static inline void forge_fix_crcs(uint8_t *rec, uint32_t header_bytes, uint64_t stored_bytes) {
    static const uint8_t zeros[8];
    uint32_t hc = kvt_crc32c(0, rec, FORGE_HEADER_CRC);
    hc = kvt_crc32c(hc, zeros, sizeof zeros);
    hc = kvt_crc32c(hc, rec + FORGE_AFTER_CRCS, header_bytes - FORGE_AFTER_CRCS);
    uint32_t rc = kvt_crc32c(hc, rec + header_bytes, stored_bytes);
    memcpy(rec + FORGE_HEADER_CRC, &hc, 4);
    memcpy(rec + FORGE_RECORD_CRC, &rc, 4);
}

/* Reads the whole record at off of fd into a malloc'd buffer (*out) and
 * parses it. Returns 0, or -1 if there is no valid record there. */
static inline int forge_read(int fd, uint64_t off, uint8_t **out, kvt_disk_record *r) {
    uint8_t head[2 * KVT_DISK_ALIGN];
    ssize_t n = pread(fd, head, sizeof head, (off_t)off);
    if (n <= 0 || kvt_disk_record_parse(head, (size_t)n, 0, r)) return -1;
    *out = malloc(r->record_bytes);
    if (pread(fd, *out, r->record_bytes, (off_t)off) < (ssize_t)(r->header_bytes + r->stored_bytes) ||
        kvt_disk_record_parse(*out, r->record_bytes, 1, r)) {
        free(*out);
        return -1;
    }
    return 0;
}

/* Rewrites the record rec (parsed as r) at off of fd after fixing its CRCs:
 * 1 when it was written. */
static inline int forge_write(int fd, uint64_t off, uint8_t *rec, const kvt_disk_record *r) {
    forge_fix_crcs(rec, r->header_bytes, r->stored_bytes);
    return pwrite(fd, rec, r->record_bytes, (off_t)off) == (ssize_t)r->record_bytes;
}

/* What forge_walk does to one record: rec (parsed as r) is at off of fd and
 * the next record starts at *next (which it may move on); returns the number
 * of records it changed. */
typedef int (*forge_fn)(int fd, uint64_t off, uint8_t *rec, const kvt_disk_record *r, uint64_t *next, void *ctx);

/* Calls fn on every valid record of the segment file path, in file order.
 * Returns the number of records changed. */
static inline int forge_walk(const char *path, forge_fn fn, void *ctx) {
    int fd = open(path, O_RDWR);
    if (fd < 0) return 0;
    off_t size = lseek(fd, 0, SEEK_END);
    int changed = 0;
    uint64_t off = 0;
    while (off < (uint64_t)size) {
        uint8_t *a;
        kvt_disk_record ra;
        if (forge_read(fd, off, &a, &ra)) {
            off += KVT_DISK_ALIGN;
            continue;
        }
        uint64_t next = off + ra.record_bytes;
        changed += fn(fd, off, a, &ra, &next, ctx);
        free(a);
        off = next;
    }
    close(fd);
    return changed;
}

static inline int forge_zero_fn(int fd, uint64_t off, uint8_t *a, const kvt_disk_record *ra, uint64_t *next, void *ctx) {
    (void)next, (void)ctx;
    memset(a + ra->header_bytes, 0, ra->stored_bytes);
    return forge_write(fd, off, a, ra);
}

/* exchanges the payloads of a and the record after it when both have the same size */
static inline int forge_swap_fn(int fd, uint64_t off, uint8_t *a, const kvt_disk_record *ra, uint64_t *next, void *ctx) {
    (void)ctx;
    uint8_t *b;
    kvt_disk_record rb;
    if (forge_read(fd, *next, &b, &rb)) return 0;
    int changed = 0;
    if (rb.stored_bytes == ra->stored_bytes && rb.header_bytes == ra->header_bytes) {
        uint8_t *tmp = malloc(ra->stored_bytes);
        memcpy(tmp, a + ra->header_bytes, ra->stored_bytes);
        memcpy(a + ra->header_bytes, b + rb.header_bytes, ra->stored_bytes);
        memcpy(b + rb.header_bytes, tmp, ra->stored_bytes);
        free(tmp);
        changed = forge_write(fd, off, a, ra) + forge_write(fd, *next, b, &rb);
    }
    *next += rb.record_bytes;
    free(b);
    return changed;
}

/* Zeroes the stored payload of every record in the segment file path and
 * fixes the CRCs (with swap, exchanges the payloads of neighbouring records
 * of equal size instead). Returns the number of records changed. */
static inline int forge_segment(const char *path, int swap) {
    return forge_walk(path, swap ? forge_swap_fn : forge_zero_fn, NULL);
}

typedef struct {
    void (*edit)(uint8_t *rec, const kvt_disk_record *r);
} forge_edit_ctx;

static inline int forge_edit_fn(int fd, uint64_t off, uint8_t *a, const kvt_disk_record *ra, uint64_t *next, void *ctx) {
    (void)next;
    ((forge_edit_ctx *)ctx)->edit(a, ra);
    return forge_write(fd, off, a, ra);
}

/* Calls edit on the bytes of every record of the segment file path (header
 * and stored payload; r is its parse before the edit), then fixes both CRCs
 * and writes it back. Returns the number of records changed. */
static inline int forge_segment_edit(const char *path, void (*edit)(uint8_t *rec, const kvt_disk_record *r)) {
    forge_edit_ctx ctx = {edit};
    return forge_walk(path, forge_edit_fn, &ctx);
}

/* forge_segment over every segment file of dir. */
static inline int forge_dir(const char *dir, int swap) {
    DIR *dh = opendir(dir);
    struct dirent *e;
    int changed = 0;
    while (dh && (e = readdir(dh))) {
        size_t n = strlen(e->d_name);
        if (strncmp(e->d_name, "seg-", 4) || n < 4 || strcmp(e->d_name + n - 4, ".kvt")) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        changed += forge_segment(path, swap);
    }
    if (dh) closedir(dh);
    return changed;
}

#endif
