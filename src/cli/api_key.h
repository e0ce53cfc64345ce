/* Where an API key comes from: the command's flag (--api-key, or serve's
 * --api-key-file), else $LOOM_API_KEY, else $VLLM_API_KEY (vLLM's variable:
 * a `vllm serve` setup moves over as it is, and `loom chat --url` finds
 * the key its server was given).  An empty key is refused, from a flag or
 * from the environment: serving "without a key" by accident (an unset
 * shell variable expanded to "") is the mistake it catches. */
#ifndef LOOM_CLI_API_KEY_H
#define LOOM_CLI_API_KEY_H

#include <stddef.h>

typedef struct {
    const char *key;   /* NULL: none anywhere */
    char source[96];   /* "--api-key", "$LOOM_API_KEY", "$VLLM_API_KEY (...)"; "" when none */
} lm_cli_api_key;

#define LM_CLI_API_KEY_ENV "LOOM_API_KEY"
#define LM_CLI_API_KEY_VLLM_ENV "VLLM_API_KEY"

/* flag_value: the flag's key (NULL: not given), flag_name: how the source
 * is named ("--api-key", "--api-key-file FILE").  Returns 0, or 2 after
 * printing the usage error of an empty key ("loom CMD: ..."). */
int lm_cli_resolve_api_key(const char *command, const char *flag_value, const char *flag_name, lm_cli_api_key *out);

#endif
