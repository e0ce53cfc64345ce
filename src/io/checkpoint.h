/* A Hugging Face checkpoint folder: either `model.safetensors` alone or
 * `model.safetensors.index.json` ({"weight_map": {tensor: shard file}}) and
 * the shard files it lists.  All tensors of all shards are available by name. */
#ifndef LOOM_IO_CHECKPOINT_H
#define LOOM_IO_CHECKPOINT_H

#include <stddef.h>

#include "base/error.h"
#include "io/safetensors.h"

typedef struct lm_checkpoint lm_checkpoint;

/* Opens the folder `dir`.  When the index exists it wins over a lone
 * model.safetensors. */
lm_status lm_checkpoint_open(const char *dir, lm_load_mode mode, lm_checkpoint **out,
                             lm_error *err);
/* The same, reporting the shards' bytes as they are read (LM_LOAD_READ)
 * to progress (may be NULL). */
lm_status lm_checkpoint_open_with(const char *dir, lm_load_mode mode, const lm_progress *progress,
                                  lm_checkpoint **out, lm_error *err);
/* A checkpoint over tensors another reader made (a GGUF file's, renamed
 * and rearranged to a Hugging Face checkpoint's names by the model family
 * that knows the mapping): the table is copied and sorted here (a name
 * twice is an error); names and data must stay valid until close, which
 * then calls release(owner) (when not NULL) to free what holds them. */
lm_status lm_checkpoint_from_tensors(const char *dir, const lm_tensor *tensors, size_t count,
                                     void (*release)(void *owner), void *owner, lm_checkpoint **out,
                                     lm_error *err);
void lm_checkpoint_close(lm_checkpoint *ck);

/* NULL if absent.  The pointer stays valid until lm_checkpoint_close. */
const lm_tensor *lm_checkpoint_find(const lm_checkpoint *ck, const char *name);

/* All tensors, sorted by name. */
size_t lm_checkpoint_count(const lm_checkpoint *ck);
const lm_tensor *lm_checkpoint_at(const lm_checkpoint *ck, size_t i);

/* Sum of n_bytes over all tensors. */
size_t lm_checkpoint_total_bytes(const lm_checkpoint *ck);
/* The folder as given to lm_checkpoint_open. */
const char *lm_checkpoint_dir(const lm_checkpoint *ck);

#endif
