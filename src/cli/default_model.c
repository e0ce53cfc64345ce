/* Finding the bundled default model (see default_model.h). */
#include "cli/default_model.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/model_folder.h"

static int has_config(const char *dir) {
    char path[PATH_MAX + 32];
    struct stat st;
    if (snprintf(path, sizeof path, "%s/config.json", dir) >= (int)sizeof path) return 0;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Appends candidate `dir` to the list of places tried; copies it into buf and
 * returns 1 if it holds a model. */
static int try_dir(const char *dir, char *buf, size_t buf_size, char *tried, size_t tried_size) {
    size_t used = strlen(tried);
    if (used < tried_size) snprintf(tried + used, tried_size - used, "%s%s", used ? ", " : "", dir);
    if (!has_config(dir) || strlen(dir) >= buf_size) return 0;
    memcpy(buf, dir, strlen(dir) + 1);
    return 1;
}

lm_status lm_cli_model_dir(const char *given, const char *needs, char *buf, size_t buf_size, const char **dir,
                           lm_error *err) {
    if (given) {
        *dir = given;
        return lm_cli_check_model_folder(given, needs ? needs : "config.json", err);
    }
    char tried[4 * PATH_MAX] = "";
    const char *env = getenv("LOOM_MODEL");
    if (env && *env) {
        if (try_dir(env, buf, buf_size, tried, sizeof tried)) goto found;
        return lm_fail(err, LM_ERR_IO, "LOOM_MODEL=%s holds no config.json", env);
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) *slash = '\0';
        static const char *const below_binary[] = {"/../models/" LM_DEFAULT_MODEL_NAME,
                                                   "/../share/loom/models/" LM_DEFAULT_MODEL_NAME};
        for (size_t i = 0; i < sizeof below_binary / sizeof below_binary[0]; i++) {
            char cand[PATH_MAX + 64], real[PATH_MAX];
            snprintf(cand, sizeof cand, "%s%s", exe, below_binary[i]);
            const char *pick = realpath(cand, real) ? real : cand;
            if (try_dir(pick, buf, buf_size, tried, sizeof tried)) goto found;
        }
    }
    if (try_dir("models/" LM_DEFAULT_MODEL_NAME, buf, buf_size, tried, sizeof tried)) goto found;
    return lm_fail(err, LM_ERR_IO,
                   "no --model given and the default model %s was not found (looked in %s); "
                   "pass --model DIR or set LOOM_MODEL",
                   LM_DEFAULT_MODEL_NAME, tried);
found:
    *dir = buf;
    return LM_OK;
}
