#include "cli/model_folder.h"

#include <ctype.h>
#include <dirent.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "io/gguf.h"

#define GET_IT "huggingface-cli download %.100s --local-dir %.100s"

/* "Qwen/Qwen3.5-0.8B": an owner and a name, of the characters the hub allows. */
static bool looks_like_hub_id(const char *s) {
    const char *slash = strchr(s, '/');
    if (!slash || slash == s || !slash[1] || strchr(slash + 1, '/') || s[0] == '.') return false;
    for (const char *p = s; *p; p++)
        if (p != slash && !isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.') return false;
    return true;
}

static bool ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && strcmp(s + n - m, tail) == 0;
}

/* The folder part of a file path ("." for a bare name). */
static void folder_of(const char *path, char *out, size_t size) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(out, size, ".");
    else if (slash == path) snprintf(out, size, "/");
    else snprintf(out, size, "%.*s", (int)(slash - path), path);
}

/* A .gguf file inside dir, for the hint (its name into out). */
static bool holds_gguf(const char *dir, char *out, size_t size) {
    DIR *d = opendir(dir);
    if (!d) return false;
    bool found = false;
    for (struct dirent *e; !found && (e = readdir(d));)
        if (ends_with(e->d_name, ".gguf")) {
            snprintf(out, size, "%s", e->d_name);
            found = true;
        }
    closedir(d);
    return found;
}

static lm_status check_file(const char *path, lm_error *err) {
    char folder[PATH_MAX];
    folder_of(path, folder, sizeof folder);
    if (ends_with(path, ".safetensors") || ends_with(path, ".json"))
        return lm_fail(err, LM_ERR_INVALID,
                       "--model %s is a file: --model takes the checkpoint folder that holds it (--model %s)", path,
                       folder);
    return lm_fail(err, LM_ERR_INVALID,
                   "--model %s is a file: --model takes a Hugging Face checkpoint folder (config.json, tokenizer.json, "
                   "*.safetensors)",
                   path);
}

lm_status lm_cli_check_model_folder(const char *dir, const char *needs, lm_error *err) {
    struct stat st;
    if (stat(dir, &st) != 0) {
        if (looks_like_hub_id(dir)) {
            const char *name = strchr(dir, '/') + 1;
            return lm_fail(err, LM_ERR_IO,
                           "--model %s: no such folder here, and loom does not download from the Hugging Face hub: "
                           "fetch it with `" GET_IT "` and pass --model %s",
                           dir, dir, name, name);
        }
        return lm_fail(err, LM_ERR_IO, "--model %s: no such folder (give the path of a checkpoint folder)", dir);
    }
    /* a GGUF file, or a folder of one, is a model (weights, tokenizer and template) */
    bool is_gguf = false;
    char gguf_path[PATH_MAX];
    lm_status located = lm_gguf_locate(dir, &is_gguf, gguf_path, sizeof gguf_path, err);
    if (located != LM_OK || is_gguf) return located;
    if (!S_ISDIR(st.st_mode)) return check_file(dir, err);
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, needs);
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) return LM_OK;
    char gguf[256];
    if (holds_gguf(dir, gguf, sizeof gguf))
        return lm_fail(err, LM_ERR_INVALID, "--model %s holds %s, a GGUF file, beside a partial checkpoint (no %s): "
                       "pass the file itself, --model %s/%s", dir, gguf, needs, dir, gguf);
    return lm_fail(err, LM_ERR_IO,
                   "--model %s has no %s: it takes a Hugging Face checkpoint folder (config.json, tokenizer.json, "
                   "*.safetensors, as `huggingface-cli download REPO --local-dir DIR` writes it)",
                   dir, needs);
}
