#include "cli/api_key.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/options.h"

int lm_cli_resolve_api_key(const char *command, const char *flag_value, const char *flag_name, lm_cli_api_key *out) {
    memset(out, 0, sizeof *out);
    if (flag_value) {
        if (!flag_value[0])
            return lm_cli_usage_error(command, "%s is empty: give a key, or leave the flag out to serve without one",
                                      flag_name);
        out->key = flag_value;
        snprintf(out->source, sizeof out->source, "%s", flag_name);
        return 0;
    }
    const char *loom_env = getenv(LM_CLI_API_KEY_ENV), *vllm_env = getenv(LM_CLI_API_KEY_VLLM_ENV);
    const char *names[2] = {LM_CLI_API_KEY_ENV, LM_CLI_API_KEY_VLLM_ENV};
    const char *values[2] = {loom_env, vllm_env};
    for (int i = 0; i < 2; i++) {
        if (!values[i]) continue;
        if (!values[i][0])
            return lm_cli_usage_error(command, "$%s is set but empty: give it a key, or unset it to go without one",
                                      names[i]);
        out->key = values[i];
        bool other_differs = i == 0 && vllm_env && strcmp(vllm_env, loom_env) != 0;
        snprintf(out->source, sizeof out->source, "$%s%s", names[i],
                 other_differs ? "; $" LM_CLI_API_KEY_VLLM_ENV " differs and is not used" : "");
        return 0;
    }
    return 0;
}
