/* Hugging Face tokenizer.json loader and byte-level BPE encoder/decoder.
 *
 * A tokenizer is loaded once from a checkpoint (or tokenizer-only) folder:
 * tokenizer.json (required), tokenizer_config.json and chat_template.jinja
 * (optional).  It follows the Rust `tokenizers` library's pipeline:
 *   1. added tokens (special or not) are cut out of the text first, longest
 *      match first;
 *   2. the remaining text is normalised (NFC, ...);
 *   3. pre-tokenised (Split on a regex, ByteLevel, Sequence);
 *   4. each piece is encoded by byte-level BPE.
 * Decoding maps ids back through the ByteLevel decoder; invalid UTF-8 in the
 * joined bytes becomes U+FFFD, as Rust's String::from_utf8_lossy does.
 *
 * A loaded tokenizer is immutable: encode/decode may be called from several
 * threads at once on the same const tokenizer. */
#ifndef LOOM_TEXT_TOKENIZER_H
#define LOOM_TEXT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct lm_tokenizer lm_tokenizer;

/* Texts longer than this are refused by lm_tokenizer_encode. */
#define LM_TOKENIZER_MAX_TEXT ((size_t)1 << 30)

/* Loads dir/tokenizer.json, dir/tokenizer_config.json (if present) and
 * dir/chat_template.jinja (if present; it wins over the config's template). */
lm_status lm_tokenizer_load(const char *dir, lm_tokenizer **out, lm_error *err);
/* Loads a tokenizer.json file alone (no config, no template). */
lm_status lm_tokenizer_load_json_file(const char *path, lm_tokenizer **out, lm_error *err);
/* Loads from tokenizer.json text held in memory (len bytes; need not be NUL-terminated). */
lm_status lm_tokenizer_load_json(const char *json, size_t len, lm_tokenizer **out, lm_error *err);
void lm_tokenizer_free(lm_tokenizer *tok);

/* Encodes UTF-8 text (len bytes, need not be NUL-terminated).  Added and
 * special tokens written in the text are always recognised.  add_special adds
 * what the tokenizer is configured to add around a sequence (the post
 * processor's template, or the BOS token when tokenizer_config.json says
 * add_bos_token).  *ids is malloc'd (caller frees; may be NULL when *n_ids is
 * 0).  Text that is not valid UTF-8 is refused with LM_ERR_INVALID. */
lm_status lm_tokenizer_encode(const lm_tokenizer *tok, const char *text, size_t len, bool add_special,
                              int32_t **ids, size_t *n_ids, lm_error *err);

/* Decodes ids into malloc'd, NUL-terminated UTF-8 text (*len excludes the
 * NUL).  skip_special drops special tokens (added tokens marked "special").
 * An id that names no token is refused with LM_ERR_INVALID. */
lm_status lm_tokenizer_decode(const lm_tokenizer *tok, const int32_t *ids, size_t n, bool skip_special,
                              char **text, size_t *len, lm_error *err);

/* The size of the id space: 1 + the largest id of any token (model or added). */
int lm_tokenizer_vocab_size(const lm_tokenizer *tok);
/* The token's string as tokenizer.json spells it (byte-level form for model
 * tokens, e.g. "Ġhello"; the content for added tokens); NULL if id names none. */
const char *lm_tokenizer_id_to_token(const lm_tokenizer *tok, int32_t id);
/* The id of a token string (added tokens first, then the model vocabulary), -1 if none. */
int32_t lm_tokenizer_token_to_id(const lm_tokenizer *tok, const char *s);
/* The raw bytes that decoding id produces (before UTF-8 repair); NULL if id names none. */
const char *lm_tokenizer_token_bytes(const lm_tokenizer *tok, int32_t id, size_t *len);
/* The most bytes one token decodes to. */
size_t lm_tokenizer_max_token_bytes(const lm_tokenizer *tok);
/* A floor on the tokens text of this many bytes encodes to, whatever it
 * holds, found without encoding it: what lets a server refuse a prompt that
 * cannot fit its context before spending seconds tokenizing it. */
size_t lm_tokenizer_min_tokens(const lm_tokenizer *tok, size_t text_bytes);
/* True for added tokens marked special (what skip_special drops). */
bool lm_tokenizer_is_special(const lm_tokenizer *tok, int32_t id);
/* True for any added token (special or not), e.g. <think> in Qwen3. */
bool lm_tokenizer_is_added(const lm_tokenizer *tok, int32_t id);

/* From tokenizer_config.json / chat_template.jinja; NULL / -1 when absent. */
const char *lm_tokenizer_chat_template(const lm_tokenizer *tok);
const char *lm_tokenizer_eos_token(const lm_tokenizer *tok);
const char *lm_tokenizer_bos_token(const lm_tokenizer *tok);
const char *lm_tokenizer_pad_token(const lm_tokenizer *tok);
int32_t lm_tokenizer_eos_id(const lm_tokenizer *tok);
int32_t lm_tokenizer_bos_id(const lm_tokenizer *tok);
int32_t lm_tokenizer_pad_id(const lm_tokenizer *tok);
bool lm_tokenizer_add_bos(const lm_tokenizer *tok);

#endif
