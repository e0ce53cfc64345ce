/* The shared option tables (see engine_options.h). */
#include "cli/engine_options.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/gguf.h"
#include "io/json_file.h"
#include "ops/ops.h"

#define ENGINE(field) offsetof(lm_cli_engine_settings, engine.field)
/* A number macro as a string literal, for help text that names a limit. */
#define LM_STRINGIFY_(x) #x
#define LM_STRINGIFY(x) LM_STRINGIFY_(x)

/* A name loom knows; whether it runs here (cuda: a GPU, a driver, a build
 * with it) is found when the engine is made, and is exit 1 with the reason,
 * not a usage error. */
static bool parse_backend(const char *value, void *field, char *message, size_t size) {
    if (!lm_backend_name_known(value)) {
        snprintf(message, size, "unknown backend '%.40s' (cpu, ref or cuda; this build has: %s)", value,
                 lm_backend_names());
        return false;
    }
    *(const char **)field = value;
    return true;
}

static bool parse_mtp_norms(const char *value, void *field, char *message, size_t size) {
    loom_mtp_norms *out = field;
    if (strcmp(value, "auto") == 0) *out = LOOM_MTP_NORMS_AUTO;
    else if (strcmp(value, "zero-centred") == 0 || strcmp(value, "zero-centered") == 0)
        *out = LOOM_MTP_NORMS_ZERO_CENTRED;
    else if (strcmp(value, "shifted") == 0) *out = LOOM_MTP_NORMS_SHIFTED;
    else {
        snprintf(message, size, "expects auto, zero-centred or shifted, got '%.40s'", value);
        return false;
    }
    return true;
}

static bool parse_long(const char *value, long long *out) {
    char *end;
    long long v = strtoll(value, &end, 10);
    if (end == value || *end) return false;
    *out = v;
    return true;
}

static bool parse_image_pixels(const char *value, void *field, char *message, size_t size) {
    long long v;
    if (!parse_long(value, &v) || (v != -1 && (v < 1024 || v > (1LL << 28)))) {
        snprintf(message, size, "must be -1 (images off) or 1024 .. 268435456, got '%.40s'", value);
        return false;
    }
    *(int64_t *)field = v;
    return true;
}

/* --draft-vocab: auto (the engine's default), full (the whole vocabulary)
 * or a count of the first token ids; the engine's 0, -1 and N. */
static bool parse_draft_vocab(const char *value, void *field, char *message, size_t size) {
    long long v;
    if (strcmp(value, "auto") == 0) v = 0;
    else if (strcmp(value, "full") == 0) v = -1;
    else if (!parse_long(value, &v) || v < 1 || v > (1LL << 24)) {
        snprintf(message, size, "expects auto, full or a token count in [1, 16777216], got '%.40s'", value);
        return false;
    }
    *(int *)field = (int)v;
    return true;
}

static bool parse_image_cache_mib(const char *value, void *field, char *message, size_t size) {
    long long v;
    if (!parse_long(value, &v) || v < 0 || v > (1LL << 20)) {
        snprintf(message, size, "expects an integer in [0, 1048576] (MiB; 0: no cache), got '%.40s'", value);
        return false;
    }
    *(int64_t *)field = v == 0 ? -1 : (int64_t)v << 20; /* the engine's -1: no cache */
    return true;
}

static bool parse_snapshot_bytes(const char *value, void *field, char *message, size_t size) {
    errno = 0;
    char *end;
    long long n = strtoll(value, &end, 10);
    int shift = 0;
    if (*end == 'K' || *end == 'k') shift = 10;
    else if (*end == 'M' || *end == 'm') shift = 20;
    else if (*end == 'G' || *end == 'g') shift = 30;
    if (shift) end++;
    if (errno || end == value || *end || n < 1 || n > ((long long)1 << 40) >> shift) {
        snprintf(message, size, "expects a size from 1 byte to 1T, e.g. 512M, got '%.40s'", value);
        return false;
    }
    *(int64_t *)field = (int64_t)n << shift;
    return true;
}

static bool parse_compute(const char *value, void *field, char *message, size_t size) {
    if (strcmp(value, "f32") != 0 && strcmp(value, "float32") != 0 && strcmp(value, "bf16") != 0 &&
        strcmp(value, "bfloat16") != 0) {
        snprintf(message, size, "expects f32 or bf16, got '%.40s'", value);
        return false;
    }
    *(const char **)field = value; /* the backend says whether it offers it (lm_backend_set_compute) */
    return true;
}

static bool parse_quantize(const char *value, void *field, char *message, size_t size) {
    if (strcmp(value, "int8") == 0 || strcmp(value, "q8_0") == 0) *(const char **)field = "int8";
    else if (strcmp(value, "fp8") == 0) *(const char **)field = "fp8";
    else if (strcmp(value, "none") == 0) *(const char **)field = "none";
    else {
        snprintf(message, size, "expects int8, fp8 or none, got '%.40s' (FP8 checkpoints load as they are, with no flag)",
                 value);
        return false;
    }
    return true;
}

static const lm_opt engine_opts[] = {
    {"--model|-m", LM_OPT_STRING, "DIR", ENGINE(model_dir), 0, 0,
     "a Hugging Face checkpoint folder (config.json, tokenizer, *.safetensors)\n"
     "or a GGUF file (qwen35, qwen35moe), also taken as the first argument;\n"
     "default: the bundled models/loom-tiny, or $LOOM_MODEL",
     NULL, NULL, NULL},
    {"--threads|-t", LM_OPT_INT, "N", ENGINE(threads), 1, 1024, "CPU threads (default: one per core)", NULL, NULL,
     NULL},
    {"--tensor-parallel-size|-tp", LM_OPT_INT, "N", ENGINE(tensor_parallel_size), 1, 64,
     "split the model over N ranks (threads of this process, each with its\nshare of the heads and MLP width; "
     "with cuda one GPU a rank,\nGPUs 0..N-1, summing over NCCL)", NULL, NULL, NULL},
    {"--enable-expert-parallel|-ep", LM_OPT_FLAG, NULL, ENGINE(expert_parallel), 0, 0,
     "with --tensor-parallel-size N > 1: deal the MoE layers' routed experts\nout whole, E/N a rank, instead of "
     "a share of every expert's width\n(attention and the shared experts stay split; the number of experts\n"
     "must be a multiple of N; on one rank or a dense model no effect)",
     NULL, NULL, NULL},
    {"--device|--backend", LM_OPT_CUSTOM, "NAME", ENGINE(backend), 0, 0,
     "cpu (default), ref (the plain reference kernels) or, in builds with\nnvcc, cuda",
     parse_backend, "cpu|ref|cuda", NULL},
    {"--mmap", LM_OPT_FLAG, NULL, ENGINE(mmap_weights), 0, 0,
     "map the weights instead of reading them into memory (decode is slower)", NULL, NULL, NULL},
    {"--max-model-len|-c|--ctx-size", LM_OPT_INT, "N", ENGINE(max_model_len), 2, 1 << 24,
     "prompt + output tokens per sequence (default: the model's\nmax_position_embeddings, at most "
     LM_STRINGIFY(LOOM_MAX_MODEL_LEN_CAP) ")",
     NULL, NULL, NULL},
    {"--allow-long-max-model-len", LM_OPT_FLAG, NULL, offsetof(lm_cli_engine_settings, allow_long_max_model_len),
     0, 0, "allow --max-model-len above max_position_embeddings (past what the\nmodel was trained for)", NULL,
     NULL, NULL},
    {"--max-num-seqs|-np|--parallel", LM_OPT_INT, "N", ENGINE(max_running), 1, 4096,
     "sequences decoding at once, each with a recurrent-state slot (default 64)", NULL, NULL, NULL},
    {"--kv-cache-tokens", LM_OPT_INT64, "N", ENGINE(kv_cache_tokens), 1, 1 << 30,
     "KV-cache pool in tokens, all sequences together (default: 4 x\nmax-model-len; at least one full sequence)",
     NULL, NULL, NULL},
    {"--max-num-batched-tokens|--max-batch-tokens|-b|--batch-size", LM_OPT_INT, "N", ENGINE(max_batch_tokens), 1,
     1 << 20, "token budget of one engine step; longer prompts are chunked (default\n512 on the cpu, 2048 with --device cuda)", NULL, NULL, NULL},
    {"--speculative-tokens|--num-speculative-tokens", LM_OPT_INT, "K", ENGINE(speculative_tokens), 0, 8,
     "draft up to K tokens per sequence and step with the model's MTP head, as\nmany as pay at the measured step costs and acceptance (default 0: off)",
     NULL, NULL, NULL},
    {"--draft-vocab", LM_OPT_CUSTOM, "N", ENGINE(draft_vocab), 0, 0,
     "MTP drafts choose among the first N token ids only (the frequent ones\nin a BPE vocabulary), reading N rows of "
     "the lm_head a draft instead of\nall; the verify stays exact (default auto: " LM_STRINGIFY(LOOM_DEFAULT_DRAFT_VOCAB)
     " where the vocabulary is\nlarger; full: the whole vocabulary)",
     parse_draft_vocab, "auto|full", NULL},
    {"--mtp-norms", LM_OPT_CUSTOM, "MODE", ENGINE(mtp_norms), 0, 0,
     "MTP head norm weights: auto (detect), zero-centred or shifted", parse_mtp_norms, "auto|zero-centred|shifted",
     NULL},
    {"--gpu-memory-utilization", LM_OPT_FLOAT, "F", ENGINE(gpu_memory_utilization), 0.01, 1,
     "with --device cuda: the fraction of the card the engine may hold,\nweights included; the KV pool gets the "
     "rest",
     NULL, NULL, NULL},
    {"--max-image-pixels", LM_OPT_CUSTOM, "N", ENGINE(max_image_pixels), 0, 0,
     "the most pixels an image keeps after resizing (default 1048576);\n-1 turns images off",
     parse_image_pixels, NULL, NULL},
    {"--max-image-decode-pixels", LM_OPT_INT64, "N", ENGINE(max_image_decode_pixels), 1024, 1 << 30,
     "the most pixels an image file may declare, refused before decoding\n(default 16777216 = 4096 x 4096; "
     "the decode's memory must fit in\n3 bytes a pixel of it)",
     NULL, NULL, NULL},
    {"--image-cache-mib", LM_OPT_CUSTOM, "N", ENGINE(image_cache_bytes), 0, 0,
     "vision-tower outputs kept for reuse (default 256; 0: off)", parse_image_cache_mib, NULL, NULL},
    {"--enable-prefix-caching", LM_OPT_SET_INT, NULL, ENGINE(enable_prefix_caching), 1, 0,
     "reuse the KV blocks and recurrent-state snapshots of prompt prefixes\nrun before (the default)", NULL,
     NULL, NULL},
    {"--no-enable-prefix-caching", LM_OPT_SET_INT, NULL, ENGINE(enable_prefix_caching), -1, 0,
     "turn prefix caching off", NULL, NULL, NULL},
    {"--prefix-snapshot-bytes", LM_OPT_CUSTOM, "N", ENGINE(prefix_snapshot_bytes), 0, 0,
     "the prefix cache's recurrent-state snapshot pool (default 256M;\nsuffix K, M, G)", parse_snapshot_bytes,
     NULL, NULL},
    {"--compute-dtype", LM_OPT_CUSTOM, "D", ENGINE(compute_dtype), 0, 0,
     "f32 (default: float32 products, batch-invariant) or bf16\n(activations rounded to bf16: faster prefill and batches, about\n1e-2 to 2e-1 of "
     "the logits' std off; cpu: AVX-512 BF16 CPUs,\nstill batch-invariant; cuda: tensor cores for 9+ rows, not\nbatch-invariant)",
     parse_compute, "f32|bf16", NULL},
    {"--quantize", LM_OPT_CUSTOM, "Q", ENGINE(quantize), 0, 0,
     "int8: the Linear layers' weights made int8 at load (blocks of 32\nwith a bf16 scale; decode reads about half the bytes of bf16;\n"
     "every backend); fp8: made FP8 (E4M3, a float32 scale per 128\nweights of a row; 1 byte a weight) on backends with FP8 weights\n"
     "(cpu, ref, cuda); none (default): as the checkpoint stores them.\nFP8 checkpoints stay FP8 without it",
     parse_quantize, "int8|fp8|none", NULL},
};

/* vLLM's and llama-server's spellings of what loom does anyway (a note),
 * or does under another name (refused, naming it). */
static const lm_opt compat_opts[] = {
    {"--enable-auto-tool-choice", LM_OPT_NOTE, NULL, 0, 0, 0,
     "not needed: tool calls are parsed whenever a request has tools", NULL, NULL, NULL},
    {"--tool-call-parser", LM_OPT_NOTE, "NAME", 0, 0, 0,
     "not needed: the parser follows the chat template (Qwen3 JSON, Qwen3.5 XML, GLM)", NULL, NULL, NULL},
    {"--reasoning-parser", LM_OPT_NOTE, "NAME", 0, 0, 0,
     "not needed: <think> blocks become reasoning_content when the chat template writes them", NULL, NULL, NULL},
    {"--dtype", LM_OPT_NOTE, "TYPE", 0, 0, 0,
     "not needed: loom runs the checkpoint's bf16 weights as stored", NULL, "auto|bfloat16|bf16",
     "loom runs the checkpoint's bf16 weights as stored; use --dtype auto or bfloat16"},
    {"--trust-remote-code", LM_OPT_NOTE, NULL, 0, 0, 0,
     "not needed: loom runs no Python; its model families are built in", NULL, NULL, NULL},
    {"--cont-batching|-cb", LM_OPT_NOTE, NULL, 0, 0, 0, "not needed: batching is always continuous", NULL, NULL,
     NULL},
    {"--n-gpu-layers|-ngl|--gpu-layers", LM_OPT_REFUSED, "N", 0, 0, 0,
     "loom runs the whole model on one backend: --device cuda (or cpu)", NULL, NULL, NULL},
    {"--quantization|-q", LM_OPT_REFUSED, "METHOD", 0, 0, 0,
     "loom makes int8 or FP8 weights at load with --quantize int8|fp8, and\nreads FP8 (block-scaled) checkpoints as they are, with no flag", NULL, NULL, NULL},
    {"--hf-repo|-hf", LM_OPT_REFUSED, "REPO", 0, 0, 0,
     "loom does not download: huggingface-cli download REPO --local-dir DIR, then --model DIR", NULL, NULL, NULL},
    {"--n-predict|-n", LM_OPT_REFUSED, "N", 0, 0, 0,
     "the output length is max_tokens in each request (loom run and chat: --max-tokens)", NULL, NULL, NULL},
    {"--chat-template", LM_OPT_REFUSED, "FILE", 0, 0, 0,
     "loom reads the template from the model folder (chat_template.jinja or\ntokenizer_config.json); "
     "loom render --template FILE tries another",
     NULL, NULL, NULL},
    {"--kv-cache-dtype", LM_OPT_REFUSED, "TYPE", 0, 0, 0,
     "the KV cache's dtype follows --compute-dtype (f32; bf16 with --compute-dtype bf16 on the cpu); "
     "size the pool with --kv-cache-tokens",
     NULL, NULL, NULL},
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

void lm_cli_engine_settings_default(lm_cli_engine_settings *s) {
    memset(s, 0, sizeof *s);
    loom_engine_options_default(&s->engine);
}

lm_opt_group lm_cli_engine_group(lm_cli_engine_settings *s) {
    return (lm_opt_group){"Model and engine", engine_opts, COUNT(engine_opts), s};
}

lm_opt_group lm_cli_model_dir_group(lm_cli_engine_settings *s) {
    return (lm_opt_group){"Model", engine_opts, 1, s}; /* --model, the table's first entry */
}

lm_opt_group lm_cli_compat_group(void) {
    return (lm_opt_group){"vLLM and llama-server flags (accepted with a note, or refused naming loom's own)",
                          compat_opts, COUNT(compat_opts), NULL};
}

void lm_cli_spec_init(lm_cli_spec *spec, const char *command, const char *synopsis, lm_cli_engine_settings *s,
                      bool whole_engine) {
    lm_cli_engine_settings_default(s);
    memset(spec, 0, sizeof *spec);
    spec->command = command;
    spec->synopsis = synopsis;
    spec->positional = &s->engine.model_dir;
    spec->positional_name = "the model folder";
    spec->groups[spec->n_groups++] = whole_engine ? lm_cli_engine_group(s) : lm_cli_model_dir_group(s);
    if (whole_engine) spec->trailer = lm_cli_compat_group();
}

/* A GGUF model's <architecture>.context_length (0 when none): config_path
 * is then "<the file>/config.json", as the commands form it from --model. */
static int gguf_context_length(const char *config_path, char *source, size_t source_size) {
    char dir[4096], file[4096];
    size_t n = strlen(config_path), tail = strlen("/config.json");
    if (n <= tail || n - tail >= sizeof dir || strcmp(config_path + n - tail, "/config.json") != 0) return 0;
    memcpy(dir, config_path, n - tail);
    dir[n - tail] = '\0';
    bool is_gguf = false;
    lm_error err = {0};
    lm_gguf *g = NULL;
    if (lm_gguf_locate(dir, &is_gguf, file, sizeof file, &err) != LM_OK || !is_gguf ||
        lm_gguf_open(file, LM_LOAD_MMAP, &g, &err) != LM_OK)
        return 0;
    const char *arch = NULL;
    char key[128];
    uint32_t positions = 0;
    if (lm_gguf_get_string(g, "general.architecture", true, &arch, &err) == LM_OK &&
        (size_t)snprintf(key, sizeof key, "%.80s.context_length", arch) < sizeof key)
        (void)lm_gguf_get_u32(g, key, false, &positions, &err);
    if (source) snprintf(source, source_size, "%.200s of %.3000s", key, file);
    lm_gguf_close(g);
    return positions <= (1u << 30) ? (int)positions : 0;
}

int lm_cli_max_positions(const char *config_path) {
    int from_gguf = gguf_context_length(config_path, NULL, 0);
    if (from_gguf > 0) return from_gguf;
    cJSON *doc = NULL;
    lm_error err = {0};
    int positions = 0;
    if (lm_json_read_file(config_path, 16u << 20, &doc, &err) == LM_OK) {
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(doc, "text_config");
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(text ? text : doc, "max_position_embeddings");
        if (!m) m = cJSON_GetObjectItemCaseSensitive(doc, "max_position_embeddings");
        if (cJSON_IsNumber(m) && m->valuedouble >= 1 && m->valuedouble <= (1 << 30)) positions = (int)m->valuedouble;
    }
    cJSON_Delete(doc);
    return positions;
}

int lm_cli_resolve_model_len(const char *command, lm_cli_engine_settings *s, const char *config_path, char *why,
                             size_t why_size) {
    int positions = lm_cli_max_positions(config_path);
    char source[4096];
    snprintf(source, sizeof source, "%s", config_path);
    if (gguf_context_length(config_path, source, sizeof source) <= 0) snprintf(source, sizeof source, "%s", config_path);
    int asked = s->engine.max_model_len;
    if (asked > 0) {
        if (positions > 0 && asked > positions && !s->allow_long_max_model_len)
            return lm_cli_usage_error(command,
                                      "--max-model-len %d is above the model's max_position_embeddings (%d in %s): "
                                      "lower it, or add --allow-long-max-model-len to go past what the model was "
                                      "trained for",
                                      asked, positions, source);
        snprintf(why, why_size, "--max-model-len%s", asked > positions && positions > 0 ? ", past max_position_embeddings" : "");
        return 0;
    }
    /* The engine takes its default (loom_default_max_model_len) and may
     * lower it to fit the pool; the phrase says where it came from. */
    s->engine.max_model_len = 0;
    if (positions <= 0)
        snprintf(why, why_size, "config.json gives no max_position_embeddings");
    else if (positions > loom_default_max_model_len(positions))
        snprintf(why, why_size, "capped from max_position_embeddings %d; --max-model-len raises it", positions);
    else
        snprintf(why, why_size, "the model's max_position_embeddings");
    return 0;
}

bool lm_cli_threads_exceed_cores(const lm_cli_engine_settings *s, char *message, size_t size) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (s->engine.threads <= 0 || cores <= 0 || s->engine.threads <= cores) return false;
    snprintf(message, size, "--threads %d is more than the %ld cores of this machine: threads will share cores "
             "and every step waits for the slowest",
             s->engine.threads, cores);
    return true;
}
