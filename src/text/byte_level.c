#include "text/byte_level.h"

#include <stdlib.h>
#include <string.h>

bool lm_text_buf_reserve(lm_text_buf *b, size_t extra) {
    if (extra > SIZE_MAX / 4 - b->n) return false;
    size_t need = b->n + extra + 1;
    if (need <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return false;
    b->p = p;
    b->cap = cap;
    return true;
}

bool lm_text_buf_append(lm_text_buf *b, const void *data, size_t n) {
    if (!lm_text_buf_reserve(b, n)) return false;
    if (n) memcpy(b->p + b->n, data, n);
    b->n += n;
    b->p[b->n] = '\0';
    return true;
}

void lm_text_buf_free(lm_text_buf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* Bytes that stand for themselves: '!'..'~', 0xA1..0xAC, 0xAE..0xFF. */
static bool byte_is_printable(uint8_t b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

uint32_t lm_byte_level_char(uint8_t b) {
    if (byte_is_printable(b)) return b;
    /* The others, in byte order, take U+0100 onwards:
     * 0x00..0x20 (33 bytes), 0x7F..0xA0 (34 bytes), 0xAD (1 byte). */
    if (b <= 0x20) return 0x100u + b;
    if (b >= 0x7F && b <= 0xA0) return 0x100u + 33 + (b - 0x7Fu);
    return 0x100u + 67; /* 0xAD */
}

int lm_byte_level_byte(uint32_t cp) {
    if (cp < 0x100) return byte_is_printable((uint8_t)cp) ? (int)cp : -1;
    if (cp < 0x100 + 33) return (int)(cp - 0x100);
    if (cp < 0x100 + 67) return (int)(0x7F + (cp - 0x100 - 33));
    if (cp == 0x100 + 67) return 0xAD;
    return -1;
}

size_t lm_byte_level_encode(const uint8_t *bytes, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) o += lm_utf8_encode_one(lm_byte_level_char(bytes[i]), out + o);
    return o;
}

long lm_byte_level_decode(const char *s, size_t n, uint8_t *out) {
    const uint8_t *u = (const uint8_t *)s;
    if (lm_utf8_valid_prefix(u, n) != n) return -1;
    size_t i = 0, o = 0;
    while (i < n) {
        size_t len;
        uint32_t cp = lm_utf8_decode_one(u + i, n - i, &len);
        int b = lm_byte_level_byte(cp);
        if (b < 0) return -1;
        out[o++] = (uint8_t)b;
        i += len;
    }
    return (long)o;
}

size_t lm_utf8_valid_prefix(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        /* ASCII runs dominate real text: skip them eight bytes at a time. */
        while (i + 8 <= n) {
            uint64_t v;
            memcpy(&v, s + i, 8);
            if (v & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= n) break;
        uint8_t c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t need;
        uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
        if (c >= 0xC2 && c <= 0xDF) need = 1;
        else if (c == 0xE0) { need = 2; lo = 0xA0; }
        else if (c >= 0xE1 && c <= 0xEC) need = 2;
        else if (c == 0xED) { need = 2; hi = 0x9F; } /* no surrogates */
        else if (c >= 0xEE && c <= 0xEF) need = 2;
        else if (c == 0xF0) { need = 3; lo = 0x90; }
        else if (c >= 0xF1 && c <= 0xF3) need = 3;
        else if (c == 0xF4) { need = 3; hi = 0x8F; }
        else return i;
        if (n - i <= need) return i;
        if (s[i + 1] < lo || s[i + 1] > hi) return i;
        for (size_t k = 2; k <= need; k++)
            if ((s[i + k] & 0xC0) != 0x80) return i;
        i += need + 1;
    }
    return n;
}

uint32_t lm_utf8_decode_one(const uint8_t *s, size_t n, size_t *len) {
    uint8_t c = s[0];
    if (c < 0x80 || n < 2) { *len = 1; return c; }
    if (c < 0xE0) { *len = 2; return ((uint32_t)(c & 0x1F) << 6) | (s[1] & 0x3F); }
    if (c < 0xF0 || n < 4) {
        *len = 3;
        return ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    }
    *len = 4;
    return ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) | ((uint32_t)(s[2] & 0x3F) << 6) |
           (s[3] & 0x3F);
}

size_t lm_utf8_encode_one(uint32_t cp, char *out) {
    uint8_t *o = (uint8_t *)out;
    if (cp < 0x80) { o[0] = (uint8_t)cp; return 1; }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | (cp >> 6));
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | (cp >> 12));
        o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | (cp >> 18));
    o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}
