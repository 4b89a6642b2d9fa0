// SPDX-License-Identifier: MIT
/* UTF-8 validation for generated text (api_utf8.h): replacement of invalid
 * sequences and the complete-character prefix a stream may send now. */
#include "api_utf8.h"

#include <stdint.h>
#include <string.h>

#include "common.h"

#define UTF8_REPLACEMENT "\xEF\xBF\xBD"
#define UTF8_REPLACEMENT_LEN 3

/* Length of the valid UTF-8 sequence at s[0..n), 0 if invalid or truncated. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    size_t len;
    uint32_t cp;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07;
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    /* overlong forms, surrogates and values past U+10FFFF are invalid */
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

char *kvt_utf8_sanitize(const char *in, size_t n, size_t *out_len) {
    const unsigned char *s = (const unsigned char *)in;
    char *out = kvt_xmalloc(n * UTF8_REPLACEMENT_LEN + 1);
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t l = utf8_seq(s + i, n - i);
        if (l == 0 || s[i] == 0) {
            memcpy(out + o, UTF8_REPLACEMENT, UTF8_REPLACEMENT_LEN);
            o += UTF8_REPLACEMENT_LEN;
            i++;
        } else {
            memcpy(out + o, s + i, l);
            o += l;
            i += l;
        }
    }
    out[o] = 0;
    if (out_len) *out_len = o;
    return out;
}

size_t kvt_utf8_complete_prefix(const char *buf, size_t n) {
    const unsigned char *s = (const unsigned char *)buf;
    for (size_t back = 1; back <= 4 && back <= n; back++) {
        unsigned char c = s[n - back];
        if ((c & 0xC0) == 0x80) continue; /* continuation byte: look further back for the lead */
        size_t want = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        if (want <= back) return n;
        /* hold back only a lead whose continuation bytes so far are right: it may still complete */
        return n - back;
    }
    return n;
}
