/* Qwen3.5 from a GGUF file as llama.cpp writes it (architectures "qwen35"
 * and "qwen35moe", convert_hf_to_gguf.py's Qwen3_5TextModel /
 * Qwen3_5MoeTextModel): the metadata becomes the text config, the tensors
 * get their Hugging Face names back, and what the converter rearranged is
 * put back, so the model loads exactly as from the checkpoint it came from.
 *
 * What the converter did, and what is done here:
 *  - value heads reordered from grouped-by-key-head to tiled order (when
 *    there are more value heads than key heads) in attn_qkv's V rows,
 *    attn_gate, ssm_alpha/ssm_beta, ssm_a, ssm_dt.bias, ssm_conv1d's V
 *    channels (rows, any dtype: a block-quantized row moves whole) and
 *    ssm_out's columns (float types; block types only when a head's columns
 *    are whole blocks, else refused naming the tensor: loom would have to
 *    dequantize it);
 *  - A_log stored as ssm_a = -exp(A_log) and the zero-centred norms as
 *    1 + w: kept as stored, the config's llama_cpp_forms telling the loader
 *    (exact: no log/exp round trip);
 *  - conv1d squeezed to [C, K]: viewed as [C, 1, K];
 *  - experts stacked into ffn_{gate,up,down}_exps [E, rows, cols]: viewed as
 *    one matrix per expert, in place;
 *  - the MTP head appended as block num_hidden_layers (nextn_predict_layers):
 *    named mtp.* again.
 * Block-quantized tensors keep their ggml dtype when the backend runs it
 * (lm_backend_supports_weights); otherwise the load is refused naming the
 * tensor and its type.  A ggml type loom has no dtype for is refused the
 * same way. */
#ifndef LOOM_MODELS_QWEN35_GGUF_H
#define LOOM_MODELS_QWEN35_GGUF_H

#include "io/checkpoint.h"
#include "io/gguf.h"
#include "models/model.h"
#include "models/qwen35/qwen35_config.h"
#include "ops/ops.h"

/* The config and a checkpoint of Hugging Face names over the file.  The
 * checkpoint takes g (closed with it, also on failure). */
lm_status lm_qwen35_gguf_checkpoint(lm_gguf *g, lm_backend *backend, lm_qwen35_config *config,
                                    lm_checkpoint **out, lm_error *err);

/* The registry's open of a GGUF file (models/registry.h): the model, its
 * MTP head's norms taken as stored with their 1 (unless options say
 * otherwise).  Takes g. */
lm_status lm_qwen35_open_gguf(lm_gguf *g, const lm_model_load_options *options, lm_backend *backend,
                              lm_model **out, lm_error *err);

/* The config alone (tokenizer-free metadata → config), for tests. */
lm_status lm_qwen35_gguf_config(const lm_gguf *g, lm_qwen35_config *config, lm_error *err);

#endif
