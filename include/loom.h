/* loom: the public C API of the serving engine.
 *
 * An engine owns a model, its caches and one engine thread that batches all
 * running requests into each forward step (continuous batching).  Any thread
 * may submit requests and read their events; each request has its own event
 * queue.  Functions that can fail return 0 on success or a loom_status code,
 * and write a message into the caller's error buffer. */
#ifndef LOOM_H
#define LOOM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    LOOM_OK = 0,
    LOOM_ERR_IO = 1,
    LOOM_ERR_FORMAT = 2,
    LOOM_ERR_INVALID = 3,     /* a bad parameter: HTTP 400 */
    LOOM_ERR_NOMEM = 4,
    LOOM_ERR_UNSUPPORTED = 5,
    LOOM_ERR_INTERNAL = 6,
    LOOM_ERR_BUSY = 100,      /* the waiting queue is full: HTTP 503, retry later */
    LOOM_ERR_TOO_LONG = 101,  /* prompt + max_tokens exceed the context: HTTP 400 */
    LOOM_ERR_SHUTDOWN = 102,  /* the engine is shutting down */
} loom_status;

typedef struct loom_engine loom_engine;
typedef struct loom_request loom_request;

/* How the MTP head's RMSNorm weights are stored: zero-centred (the scale is
 * 1 + w, as released) or already shifted by a converter (the scale is w). */
typedef enum { LOOM_MTP_NORMS_AUTO, LOOM_MTP_NORMS_ZERO_CENTRED, LOOM_MTP_NORMS_SHIFTED } loom_mtp_norms;

typedef struct {
    const char *model_dir;     /* Hugging Face checkpoint folder */
    const char *config_path;   /* with random_weights: a config.json shape, no checkpoint */
    bool random_weights;
    uint64_t random_seed;
    const char *backend;       /* where the model runs: "cpu" (default) or "ref" (plain reference kernels) */
    int threads;               /* CPU threads for kernels; 0 = one per core */
    bool mmap_weights;         /* map the weights instead of reading them (slower decode) */
    int kv_block_size;         /* tokens per KV-cache block (default 32) */
    int64_t kv_cache_tokens;   /* KV pool size in tokens, all sequences together (0 = default) */
    int max_running;           /* sequences decoding at once = recurrent-state slots (default 64) */
    int max_batch_tokens;      /* token budget of one step; long prompts are chunked (0: by device,
                                  loom_default_batch_tokens) */
    int max_model_len;         /* prompt + output limit per sequence (0 = model's, capped at 32768) */
    int max_waiting;           /* queued requests before submit answers LOOM_ERR_BUSY (default 1024) */
    int speculative_tokens;    /* up to K draft tokens per sequence and step from the model's MTP
                                  head (0 = off, max 8); each step the engine drafts 0..K per
                                  sequence, what pays at its measured step costs and acceptance;
                                  ignored when the checkpoint has no usable head */
    int draft_vocab;           /* the MTP head drafts from the first N token ids only (a reduced-
                                  vocabulary draft head: a draft round reads N / vocab of the
                                  lm_head; the verify keeps the whole vocabulary, so outputs do
                                  not change): 0 = default, LOOM_DEFAULT_DRAFT_VOCAB where the
                                  vocabulary is larger; -1 = the whole vocabulary */
    loom_mtp_norms mtp_norms;  /* default AUTO: detected from the stored weights */
    /* Images (models with a vision tower): the most pixels an image keeps
     * after resizing (default 1048576 = 1024 x 1024; larger images are
     * resized down to it, as transformers does at its processor's own,
     * larger, max_pixels; -1: images off, no vision workspace), and the
     * bytes of vision-tower outputs kept for reuse across requests
     * (default 256 MiB; -1: no cache). */
    int64_t max_image_pixels;
    int64_t image_cache_bytes;
    /* The most pixels an image file may declare (width x height), judged
     * from its header before anything is decoded (Pillow's decompression-
     * bomb limit, scaled to 64 MB an image); the decode's memory (the RGB,
     * and what a progressive JPEG or a lossless WebP keeps for the whole
     * image) must fit in 3 bytes a pixel of it.  0: 16777216 (4096 x 4096:
     * 48 MiB of RGB); 1024 .. 2^30. */
    int64_t max_image_decode_pixels;
    /* Device backends: the fraction of the card's memory the engine may
     * hold, weights included (vLLM's --gpu-memory-utilization); the KV
     * pool takes what the weights and the workspace leave.  0: the pool is
     * kv_cache_tokens (or its default) as on the cpu. */
    float gpu_memory_utilization;
    /* The precision of the dense products: "f32" (NULL, the default: every
     * product in float32, batch-invariant) or "bf16" (device backends:
     * products of many rows on tensor cores with bf16 activations; faster
     * prefill and large batches; 1e-2 to 9e-2 of the logits' std off the
     * references on the fixtures, and not batch-invariant). */
    const char *compute_dtype;
    /* The weights of the Linear layers: NULL or "none" as the checkpoint
     * stores them; "int8": made int8 at load (blocks of 32 weights with one
     * bf16 scale; the decode reads about half the bytes of bf16; backends
     * cpu and ref).  FP8 checkpoints load as int8 whatever this says (as
     * bf16 on a backend without int8 weights: cuda). */
    const char *quantize;
    /* Prefix caching (vLLM's --enable-prefix-caching): a request whose
     * prompt starts with tokens (and images) the engine has run before
     * resumes from their cached KV blocks and recurrent-state snapshot and
     * computes only the rest.  1 on, -1 off, 0 the default (on). */
    int enable_prefix_caching;
    /* The recurrent-state snapshot pool of prefix caching, in bytes (0:
     * 256 MiB); models without recurrent state need none. */
    int64_t prefix_snapshot_bytes;
    /* != 0: the seed unseeded requests draw theirs from, so that a run's
     * results repeat (vLLM's --seed); 0: one from the clock. */
    uint64_t seed;
    /* Tensor parallelism (vLLM's --tensor-parallel-size): the model split
     * over this many ranks, each with its share of the attention and
     * Gated DeltaNet heads and of the MLP width (every expert's in MoE),
     * threads of this process summing their partial products.  0 or 1: one.
     * The cpu and ref backends (threads shared out among the ranks), or
     * cuda with rank r on GPU r (summed through NCCL); a checkpoint folder
     * (or random weights) of the Qwen3.5 or GLM-4.6V families. */
    int tensor_parallel_size;
    /* Expert parallelism (vLLM's --enable-expert-parallel), with
     * tensor_parallel_size N > 1: the MoE layers' routed experts are dealt
     * out whole, rank r keeping experts [r·E/N, (r+1)·E/N), instead of a
     * share of every expert's width; attention, Gated DeltaNet, dense MLPs
     * and the shared experts stay split as above.  Every rank holds every
     * token (the activations are replicated over the group), so it routes
     * them all and computes only the pairs of its own experts: no
     * all-to-all, the all-reduce after the MoE block combines.  The number
     * of experts must be a multiple of N.  With one rank, or a dense
     * model, it changes nothing (as in vLLM, whose expert-parallel size is
     * the tensor-parallel one). */
    bool expert_parallel;
    /* Loading's progress (NULL: none): called, from the loading threads
     * and possibly from several at once, with bytes done and bytes more
     * to do under a phase ("reading the checkpoint", "placing the
     * weights", "making random weights"; the same pointer each time).
     * loom_engine_create returns when the load is done. */
    void (*load_progress)(void *ctx, const char *phase, uint64_t done_bytes, uint64_t more_total_bytes);
    void *load_progress_ctx;
} loom_engine_options;

void loom_engine_options_default(loom_engine_options *options);
/* The context limit an engine takes when max_model_len is 0, the one place
 * it is decided: config.json's max_position_embeddings, at most
 * LOOM_MAX_MODEL_LEN_CAP; LOOM_MAX_MODEL_LEN_UNKNOWN when the config gives
 * none (<= 0).  The engine lowers it, saying so (loom_engine_info's
 * max_model_len_note), where the KV pool it is given cannot hold one
 * sequence of it. */
#define LOOM_MAX_MODEL_LEN_CAP 32768
#define LOOM_DEFAULT_DRAFT_VOCAB 32768 /* the draft head's ids by default (draft_vocab) */
#define LOOM_MAX_MODEL_LEN_UNKNOWN 4096
int loom_default_max_model_len(int max_position_embeddings);
/* The step budget an engine on this backend ("cpu", "ref", "cuda"; NULL:
 * cpu) takes when max_batch_tokens is 0: 2048 on a GPU, 512 on a CPU. */
int loom_default_batch_tokens(const char *backend);
int loom_engine_create(const loom_engine_options *options, loom_engine **out, char *error,
                       size_t error_size);
/* Cancels what is in flight, stops the engine thread and frees everything.
 * Requests not yet freed stay valid for loom_next_event / loom_request_free. */
void loom_engine_destroy(loom_engine *engine);

/* Sampling, as OpenAI and vLLM define the fields. */
typedef struct {
    float temperature;         /* 0 = greedy */
    int top_k;                 /* <= 0: off */
    float top_p;               /* 1: off */
    float min_p;               /* 0: off */
    float repetition_penalty;  /* 1: off; applies to prompt and output tokens */
    float presence_penalty;    /* 0: off; output tokens */
    float frequency_penalty;   /* 0: off; output tokens */
    const int32_t *logit_bias_ids;
    const float *logit_bias_values;
    int n_logit_bias;
    bool has_seed;             /* seeded results do not depend on the rest of the batch */
    uint64_t seed;
    int logprobs;              /* -1: none; 0: the chosen token's; k > 0: and the top k */
} loom_sampling;

/* An image of a request: the bytes of a PNG, JPEG or WebP file (copied
 * at submit). */
typedef struct {
    const void *data;
    size_t size;
} loom_image;

#define LOOM_MAX_IMAGES 16 /* per request */

/* Constrained decoding (structured outputs): a grammar the output must
 * follow, compiled once and given to any number of requests (each takes a
 * reference at submit; free yours when done).  Tokens the grammar does not
 * allow get -inf before sampling, the end-of-sequence and stop tokens are
 * allowed only where the grammar is complete, and a choice finishes
 * (LOOM_FINISH_STOP) when the grammar is complete and nothing may follow. */
typedef enum {
    LOOM_GRAMMAR_JSON,        /* any JSON value */
    LOOM_GRAMMAR_JSON_OBJECT, /* any JSON object (response_format json_object) */
    LOOM_GRAMMAR_JSON_SCHEMA, /* text: a JSON Schema (the subset in src/grammar/json_grammar.h) */
    LOOM_GRAMMAR_REGEX,       /* text: a regular expression the whole output matches */
    LOOM_GRAMMAR_CHOICE,      /* choices: the output is exactly one of them */
    LOOM_GRAMMAR_GBNF,        /* text: a GBNF grammar (llama.cpp's notation, src/grammar/gbnf.h), from `root` */
} loom_grammar_kind;

typedef enum { LOOM_JSON_WHITESPACE_COMPACT = 0, LOOM_JSON_WHITESPACE_ANY } loom_json_whitespace;

typedef struct {
    loom_grammar_kind kind;
    const char *text;          /* the schema, the pattern or the grammar */
    size_t text_len;
    const char *const *choices;
    int n_choices;
    const char *suffix;        /* NULL, or text that must follow the value (a forced call's closing) */
    /* the JSON kinds' whitespace between tokens: compact (the default: one
     * optional space after ':' and ',', none elsewhere) or any; a pattern
     * (a regular expression every gap matches) overrides both */
    loom_json_whitespace whitespace;
    const char *whitespace_pattern;
} loom_grammar_spec;

typedef struct loom_grammar loom_grammar;

/* LOOM_ERR_UNSUPPORTED names a schema feature or regex construct loom does
 * not implement; LOOM_ERR_INVALID a malformed spec; LOOM_ERR_NOMEM a spec
 * past the size bounds. */
int loom_grammar_compile(const loom_grammar_spec *spec, loom_grammar **out, char *error, size_t error_size);
void loom_grammar_free(loom_grammar *grammar);

typedef struct {
    const int32_t *prompt;
    int n_prompt;
    /* Images, in the order of their placeholders in the prompt: one
     * placeholder token per image (the model's image token, as its chat
     * template writes it; loom repeats it once per row of the vision
     * tower's output), or every image's rows already repeated. */
    const loom_image *images;
    int n_images;
    int max_tokens;            /* default 16 */
    /* max_tokens is an upper bound: lowered to what the context leaves after
     * the prompt (its images' rows included) instead of failing with
     * LOOM_ERR_TOO_LONG.  For a caller's default when a request names no
     * max_tokens: the image rows are only known once the images are read. */
    bool max_tokens_fit;
    int min_tokens;            /* stop tokens are masked before this many */
    bool ignore_eos;
    const int32_t *stop_token_ids;
    int n_stop_token_ids;
    const char *const *stop;   /* stop strings, matched on the text, not emitted */
    int n_stop;
    bool skip_special_tokens;  /* for the text deltas (default true) */
    /* Special tokens whose text is kept even when skip_special_tokens is set
     * (a server's reasoning and tool-call markers, e.g. <think>, <tool_call>);
     * at most 64 ids inside the vocabulary, copied at submit. */
    const int32_t *keep_special_token_ids;
    int n_keep_special_token_ids;
    int n;                     /* choices sharing one prefill (default 1) */
    bool no_speculation;       /* opt out of MTP speculation (requests with n > 1 never speculate) */
    const loom_grammar *grammar; /* NULL: unconstrained; a reference is taken at submit */
    loom_sampling sampling;
} loom_request_params;

void loom_request_params_default(loom_request_params *params);

typedef enum { LOOM_EVENT_TOKEN, LOOM_EVENT_FINISH, LOOM_EVENT_ERROR } loom_event_type;

typedef enum {
    LOOM_FINISH_NONE,
    LOOM_FINISH_STOP,      /* eos, a stop token or a stop string */
    LOOM_FINISH_LENGTH,    /* max_tokens or the context limit */
    LOOM_FINISH_CANCELLED,
    LOOM_FINISH_ERROR,
} loom_finish_reason;

typedef struct {
    int32_t token;
    float logprob;
} loom_token_logprob;

typedef struct {
    loom_event_type type;
    int choice;                     /* 0 .. n-1 */
    /* TOKEN */
    int32_t token;
    const char *text;               /* the text this token completes (UTF-8, maybe empty);
                                       NULL when the model has no tokenizer */
    size_t text_len;
    float logprob;                  /* when logprobs >= 0 */
    int n_top;
    const loom_token_logprob *top;  /* n_top entries, best first */
    /* FINISH */
    loom_finish_reason finish_reason;
    int32_t stop_token;             /* the stop token that ended it, or -1 */
    int stop_string;                /* index of the stop string that ended it, or -1 */
    int prompt_tokens, completion_tokens;
    int cached_tokens;              /* of the prompt tokens, those the prefix cache supplied;
                                       prompt_tokens and cached_tokens come with every TOKEN too
                                       (what a request cut off before its FINISH had) */
    int drafted_tokens, accepted_tokens; /* speculative decoding: drafts verified / accepted */
    /* ERROR (also ends the choice) */
    const char *error;
} loom_event;

/* Queues a request.  Fails with LOOM_ERR_BUSY when the waiting queue is
 * full, LOOM_ERR_TOO_LONG / LOOM_ERR_INVALID on bad parameters. */
int loom_submit(loom_engine *engine, const loom_request_params *params, loom_request **out,
                char *error, size_t error_size);
/* Waits up to timeout_ms (< 0: forever) for the request's next event.
 * Returns 1 with *event filled (valid until the next call), 0 on timeout,
 * -1 once every choice has finished and all events were read. */
int loom_next_event(loom_request *request, loom_event *event, int timeout_ms);
/* Cancels from any thread; its KV blocks and state slot are freed at the
 * engine's next step, and FINISH events with LOOM_FINISH_CANCELLED follow. */
void loom_cancel(loom_request *request);
/* Cancels if still running and releases the handle. */
void loom_request_free(loom_request *request);
/* Asks to be told when the request has something to read, so that a caller
 * serving many requests can wait on its own event loop instead of in
 * loom_next_event.  notify(ctx) is called on the engine's thread, with the
 * request's lock held, each time an event is queued (a token, a finish, an
 * error): it must not block nor call back into loom; it only wakes whoever
 * reads (then loom_next_event with timeout 0).  Calls may be coalesced by
 * the reader, never lost: an event queued before the hook was set (submit
 * returns a running request) is announced by one call made here, on the
 * caller's thread, before this returns, so setting it right after
 * loom_submit is race-free.  Calls continue after loom_cancel (its FINISH
 * events are events too) until loom_request_free, which stops them: once
 * it returns, ctx is never used again.  notify NULL stops them too. */
void loom_request_set_notify(loom_request *request, void (*notify)(void *ctx), void *ctx);

typedef struct {
    int running, waiting;
    int kv_blocks_total, kv_blocks_free;
    int state_slots_total, state_slots_free;
    uint64_t prompt_tokens, generation_tokens, requests_finished, preemptions, steps;
    uint64_t spec_drafted_tokens, spec_accepted_tokens, spec_verify_steps;
    /* Constrained decoding: token masks computed, and the engine thread's
     * time in grammars (masks, advancing states, checking drafts). */
    uint64_t grammar_masks, grammar_ns;
    int speculative_tokens;    /* the most drafts per step in use (0 when speculation is off or
                                   the model has no head) */
    uint64_t images_encoded;   /* images run through the vision tower */
    uint64_t image_cache_hits; /* images whose rows came from the cache instead */
    uint64_t image_cache_bytes; /* held by the cache now */
    /* Prefix caching (vLLM's counters, in tokens): prompt tokens looked up
     * and of those found cached; free KV blocks still holding cached
     * content (reclaimed when the pool needs them); the state snapshot
     * pool, in snapshots and bytes. */
    bool prefix_caching;
    uint64_t prefix_cache_queries, prefix_cache_hits;
    int kv_blocks_cached;
    int snapshots_total, snapshots_used;
    uint64_t snapshot_bytes_total, snapshot_bytes_used;
} loom_stats;

void loom_engine_stats(loom_engine *engine, loom_stats *stats);

/* Benchmarks (loom bench --planted-acceptance): after the model's MTP head
 * has drafted k tokens for a sequence, `fn` may overwrite them (given the
 * sequence's prompt + generated tokens) and returns how many to keep
 * (0..k).  Drafts are verified as always, so outputs do not change; what
 * changes is how many are accepted, which lets a benchmark measure
 * speculation's cost at an acceptance it chooses.  Called on the engine
 * thread; set it before submitting requests.  NULL removes it. */
typedef int (*loom_draft_override)(void *ctx, const int32_t *tokens, int n_tokens, int n_prompt,
                                   int32_t *drafts, int k);
void loom_engine_set_draft_override(loom_engine *engine, loom_draft_override fn, void *ctx);

/* Empties the prefix cache: every cached KV block no request holds becomes
 * free and every state snapshot is dropped (blocks held by running
 * requests stay theirs).  Waits for the engine thread to do it. */
int loom_engine_reset_prefix_cache(loom_engine *engine, char *error, size_t error_size);
/* What an engine runs, as sized at create (for a startup summary). */
typedef struct {
    char family[32];            /* "qwen3_5" */
    char architecture[64];      /* config.json's architectures[0] */
    int64_t n_parameters;       /* text model, MTP head excluded */
    int64_t n_active_parameters; /* of those, what one token uses (MoE: the top-k experts) */
    uint64_t weight_bytes;      /* as stored */
    char weights_made[160];     /* what the load made of them: "weights made int8 at load: N MB",
                                 * "FP8 weights made bf16 at load: N MB, as ..."; "" when as stored */
    char backend[16];
    char cpu_kernels[16];       /* the cpu backend's kernel set: "avx512", "avx2", "generic", "native"; "" on others */
    int threads;
    int max_model_len, max_position_embeddings;
    char max_model_len_note[256]; /* why the default was lowered to max_model_len ("" when it was not) */
    int64_t kv_cache_tokens;    /* the KV pool, all sequences together */
    char kv_cache_dtype[8];     /* its elements: "f32", or "bf16" (the cpu's bf16 compute) */
    int64_t kv_cache_bytes;     /* its k and v pools over every full-attention layer */
    int kv_block_size;
    int state_slots;            /* recurrent-state slots = sequences decoding at once */
    int max_batch_tokens;
    int speculative_tokens;     /* K in use; 0: off */
    int draft_vocab;            /* token ids the MTP drafts choose from (the whole vocabulary: its size) */
    /* Weight bytes speculation's parts read, from the model's shapes: a
     * plain decode step (a verify of any rows reads the same: each product
     * streams its weights once for all of a step's rows), one MTP draft
     * round with the draft head in use and with the whole vocabulary (a
     * sequence's k drafts are k rounds; sequences share them). */
    int64_t decode_step_bytes, draft_round_bytes, draft_round_bytes_full;
    char speculative_status[512]; /* when asked for but off: why */
    bool vision;                /* the model has a vision tower and images are on */
    char compute[8];            /* "f32" or "bf16": the dense products' precision */
    bool prefix_caching;        /* on */
    int64_t prefix_snapshot_bytes; /* its recurrent-state snapshot pool (0: the model needs none) */
} loom_engine_info;

void loom_engine_describe(const loom_engine *engine, loom_engine_info *info);

/* The text a prompt writes for one image: the model's vision-start,
 * image placeholder and vision-end tokens ("<|vision_start|><|image_pad|>
 * <|vision_end|>" for Qwen3.5), which the tokenizer turns into exactly
 * those ids; NULL when the engine takes no images (no vision tower, images
 * off, or no tokenizer). */
const char *loom_engine_image_marker(const loom_engine *engine);

/* The model's vocabulary size and end-of-sequence ids (for callers that
 * validate token ids or logit_bias). */
int loom_engine_vocab_size(const loom_engine *engine);

#ifdef __cplusplus
}
#endif

#endif
