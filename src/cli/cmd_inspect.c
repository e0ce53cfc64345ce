/* loom inspect [--model DIR] (default: the bundled model): what a checkpoint folder holds and what loom
 * makes of it (architecture, shapes, dtypes, parameters, missing or unused
 * tensors). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "models/qwen35_mtp.h"

static void usage(FILE *f) {
    fprintf(f, "usage: loom inspect [--model DIR] [--mmap] [--mtp-norms auto|zero-centred|shifted]\n"
               "Describes a Hugging Face checkpoint folder: architecture, shapes, dtypes,\n"
               "parameter count, and which tensors are missing or unused.\n");
}

static void print_config(const lm_qwen35_config *c) {
    printf("architecture: %s%s\n", c->model_type, c->is_moe ? " (mixture of experts)" : " (dense)");
    printf("  vocab %d, hidden %d, layers %d, mlp %d\n", c->vocab_size, c->hidden_size,
           c->num_hidden_layers, c->intermediate_size);
    printf("  full attention: %d heads, %d kv heads, head dim %d, rotary dims %d (theta %g, "
           "mrope sections %d/%d/%d)\n",
           c->num_attention_heads, c->num_key_value_heads, c->head_dim, c->rot_dim,
           (double)c->rope_theta, c->mrope_section[0], c->mrope_section[1], c->mrope_section[2]);
    printf("  gated deltanet: %d key heads x %d, %d value heads x %d, conv width %d\n",
           c->linear_num_key_heads, c->linear_key_head_dim, c->linear_num_value_heads,
           c->linear_value_head_dim, c->linear_conv_kernel_dim);
    printf("  layer schedule: ");
    for (int i = 0; i < c->num_hidden_layers; i++)
        putchar(c->layer_types[i] == LM_LAYER_FULL_ATTENTION ? 'F' : 'L');
    printf("  (L = gated deltanet, F = full attention)\n");
    if (c->is_moe)
        printf("  experts: %d, %d per token, width %d, shared expert width %d\n", c->num_experts,
               c->num_experts_per_tok, c->moe_intermediate_size, c->shared_expert_intermediate_size);
    printf("  mtp head layers: %d, vision tower: %s, tied embeddings: %s\n",
           c->mtp_num_hidden_layers, c->has_vision_config ? "yes" : "no",
           c->tie_word_embeddings ? "yes" : "no");
}

/* Prints tensor groups by the first components of their names. */
static void print_groups(const lm_checkpoint *ck, const lm_weights *used, bool want_used) {
    size_t n = lm_checkpoint_count(ck);
    char last[128] = "";
    size_t count = 0;
    int64_t params = 0;
    for (size_t i = 0; i <= n; i++) {
        const lm_tensor *t = i < n ? lm_checkpoint_at(ck, i) : NULL;
        if (t && (used && lm_weights_was_used(used, t)) != want_used) continue;
        char group[128] = "";
        if (t) { /* "model.visual.blocks.3.x" -> "model.visual" ; "mtp.fc.weight" -> "mtp" */
            const char *name = t->name;
            const char *cut = strchr(name, '.');
            if (cut && strncmp(name, "model.", 6) == 0) cut = strchr(cut + 1, '.');
            size_t len = cut ? (size_t)(cut - name) : strlen(name);
            if (len >= sizeof group) len = sizeof group - 1;
            memcpy(group, name, len);
        }
        if (strcmp(group, last) != 0) {
            if (count) printf("    %-40s %6zu tensors, %lld parameters\n", last, count, (long long)params);
            snprintf(last, sizeof last, "%s", group);
            count = 0;
            params = 0;
        }
        if (t) {
            count++;
            params += t->n_elements;
        }
    }
}

/* Whether the Multi-Token-Prediction head loaded, and its norm convention. */
static void print_mtp(const lm_qwen35_model *m) {
    if (!m->has_mtp) {
        printf("%s\n", m->mtp_missing);
        return;
    }
    const lm_qwen35_mtp *h = m->mtp;
    printf("mtp head: loaded (%s*: fc, one full-attention layer, dense MLP)\n", h->prefix);
    printf("  norms stored %s, %s (mean of the stored pre-fc and final norm weights %.3f)\n",
           h->norms_were_shifted ? "with the 1 already added" : "zero-centred (scale 1 + w)",
           h->norms_forced ? "as forced" : "detected", (double)h->stored_norm_mean);
}

int cmd_inspect_main(int argc, char **argv) {
    static const struct option options[] = {
        {"model", required_argument, 0, 'm'}, {"mmap", no_argument, 0, 'M'},
        {"mtp-norms", required_argument, 0, 'N'},
        {"help", no_argument, 0, 'h'},        {0, 0, 0, 0},
    };
    const char *dir = NULL;
    lm_load_mode mode = LM_LOAD_READ;
    lm_qwen35_load_options load_options = {.mtp_norms = LM_MTP_NORMS_AUTO};
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
        switch (opt) {
        case 'm': dir = optarg; break;
        case 'M': mode = LM_LOAD_MMAP; break;
        case 'N': if (!lm_cli_parse_mtp_norms(optarg, &load_options.mtp_norms)) return 2; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return 2;
    }
    lm_error err = {0};
    char path[4096], model_buf[4096];
    if (lm_cli_model_dir(dir, model_buf, sizeof model_buf, &dir, &err) != LM_OK) {
        fprintf(stderr, "loom: %s\n", err.message);
        return 1;
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    lm_qwen35_config config;
    if (lm_qwen35_config_load(path, &config, &err) != LM_OK) {
        fprintf(stderr, "loom: %s\n", err.message);
        return 1;
    }
    print_config(&config);
    lm_checkpoint *ck = NULL;
    if (lm_checkpoint_open(dir, mode, &ck, &err) != LM_OK) {
        fprintf(stderr, "loom: %s\n", err.message);
        return 1;
    }
    size_t n = lm_checkpoint_count(ck);
    size_t by_dtype[LM_DTYPE_COUNT] = {0};
    int64_t params = 0;
    for (size_t i = 0; i < n; i++) {
        const lm_tensor *t = lm_checkpoint_at(ck, i);
        by_dtype[t->dtype]++;
        params += t->n_elements;
    }
    printf("checkpoint: %zu tensors, %lld parameters, %.1f MB\n", n, (long long)params,
           (double)lm_checkpoint_total_bytes(ck) / 1e6);
    printf("  dtypes:");
    for (int d = 0; d < LM_DTYPE_COUNT; d++)
        if (by_dtype[d]) printf(" %s x%zu", lm_dtype_name((lm_dtype)d), by_dtype[d]);
    printf("\n");

    lm_qwen35_model model;
    int rc = 0;
    if (lm_qwen35_load_with(ck, &config, &load_options, &model, &err) != LM_OK) {
        printf("text model: cannot be built: %s\n", err.message);
        rc = 1;
    } else {
        printf("text model: complete (%zu tensors used, %.1f MB, lm_head %s)\n",
               model.weights.n_used, (double)lm_weights_bytes_used(&model.weights) / 1e6,
               model.lm_head_tied ? "tied to embed_tokens" : "separate");
        print_mtp(&model);
        printf("  used (text model and mtp head):\n");
        print_groups(ck, &model.weights, true);
        printf("  not used (the vision tower is loaded by a later feature):\n");
        print_groups(ck, &model.weights, false);
        lm_qwen35_free(&model);
    }
    lm_checkpoint_close(ck);
    return rc;
}
