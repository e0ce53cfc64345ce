/* A tokenizer and chat template from a GGUF file's metadata, as llama.cpp's
 * converter writes them (gguf-py's SpecialVocab and the converter's
 * get_vocab_base): tokenizer.ggml.model "gpt2" (byte-level BPE),
 * tokenizer.ggml.tokens / token_type / merges, tokenizer.ggml.pre (the
 * pre-tokenizer by name), the bos/eos/padding ids, add_bos_token, and
 * tokenizer.chat_template.
 *
 * The metadata is turned into the tokenizer.json a Hugging Face checkpoint
 * would carry and loaded by the same code, so the two encode alike:
 *  - NORMAL tokens are the BPE vocabulary; CONTROL tokens are added special
 *    tokens, USER_DEFINED ones added non-special tokens (normalized false,
 *    as Qwen's); UNUSED ids (the converter's "[PAD<i>]" fillers) are holes;
 *  - the pre-tokenizer name becomes its split regex (llama-vocab.cpp's
 *    table gives the tokenizer.json regex each name stands for): "qwen2"
 *    and "qwen35", with NFC normalisation and ByteLevel, as Qwen's
 *    tokenizer.json has them.  Another name is refused by name.
 * Anything else (another tokenizer model, a token type loom does not know)
 * is refused naming the key. */
#ifndef LOOM_TEXT_TOKENIZER_GGUF_H
#define LOOM_TEXT_TOKENIZER_GGUF_H

#include <stdbool.h>

#include "io/gguf.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

lm_status lm_tokenizer_from_gguf(const lm_gguf *g, lm_tokenizer **out, lm_error *err);

/* tokenizer.chat_template compiled, with the bos/eos token strings of the
 * ids the metadata names (NULL when absent; malloc'd, when asked for). */
lm_status lm_chat_template_from_gguf(const lm_gguf *g, lm_chat_template **out, char **bos, char **eos,
                                     lm_error *err);

/* Whether dir has a tokenizer loom can load: dir/tokenizer.json, or a GGUF
 * file (io/gguf.h, lm_gguf_locate). */
bool lm_tokenizer_available(const char *dir);

#endif
