/* GPT-2's byte-level alphabet (the ByteLevel pre-tokenizer and decoder of
 * Hugging Face tokenizers): every byte is written as one printable Unicode
 * character so a BPE vocabulary over bytes can be stored as text.  Printable
 * Latin-1 bytes stand for themselves; the other 68 bytes map, in order, to
 * U+0100..U+0143 (space 0x20 becomes U+0120 'Ġ', newline U+010A 'Ċ').
 * Also: small UTF-8 helpers shared by the tokenizer files. */
#ifndef LOOM_TEXT_BYTE_LEVEL_H
#define LOOM_TEXT_BYTE_LEVEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The character that stands for byte b. */
uint32_t lm_byte_level_char(uint8_t b);
/* The byte a character stands for, or -1 when it is not in the alphabet. */
int lm_byte_level_byte(uint32_t cp);

/* Writes the byte-level text of n bytes into out (at most 2n bytes); returns its length. */
size_t lm_byte_level_encode(const uint8_t *bytes, size_t n, char *out);
/* Decodes byte-level text s (UTF-8, n bytes) back to bytes in out (at most n
 * bytes).  Returns the number of bytes, or -1 when some character is not in
 * the alphabet or s is not valid UTF-8 (the ByteLevel decoder then keeps the
 * token's text as it is). */
long lm_byte_level_decode(const char *s, size_t n, uint8_t *out);

/* A growable byte buffer. */
typedef struct {
    char *p;
    size_t n, cap;
} lm_text_buf;

/* Makes room for extra more bytes (plus a NUL); false when out of memory or too large. */
bool lm_text_buf_reserve(lm_text_buf *b, size_t extra);
bool lm_text_buf_append(lm_text_buf *b, const void *data, size_t n);
void lm_text_buf_free(lm_text_buf *b);

/* Length of the valid UTF-8 prefix of s (strict: no surrogates, no overlongs). */
size_t lm_utf8_valid_prefix(const uint8_t *s, size_t n);
/* Decodes the character at s (which must be valid UTF-8 of n > 0 bytes);
 * stores its length in *len. */
uint32_t lm_utf8_decode_one(const uint8_t *s, size_t n, size_t *len);
/* Writes the UTF-8 of cp (a valid scalar value) into out; returns 1..4. */
size_t lm_utf8_encode_one(uint32_t cp, char *out);

#endif
