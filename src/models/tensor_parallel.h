/* A model split over the ranks of a tensor-parallel group (issue 19), as
 * one lm_model: n_ranks models of one family, each holding its rank's
 * share on its own backend (lm_model_load_options.tensor_parallel), driven
 * in lockstep.  Every op with collectives (forward, draft, rollback, the
 * MTP head's sequence logits) runs on all ranks at once, ranks 1.. on
 * threads of their own; the cache moves run on each rank in turn; images go
 * through rank 0's tower alone (the rows it makes feed every rank's
 * forward).  Rank 0's outputs are the model's: the ranks compute the same
 * bits.  The engine sees one model. */
#ifndef LOOM_MODELS_TENSOR_PARALLEL_H
#define LOOM_MODELS_TENSOR_PARALLEL_H

#include "models/model.h"

/* The checkpoint folder dir (or, with options->random_weights, random
 * weights of random_config's shape: each rank makes its share's own values,
 * for benchmarks) over n_ranks ranks: rank 0 on `backend` (the caller's,
 * which outlives the model), ranks 1.. on backends the model makes of the
 * same kind and compute dtype and frees.  A host backend's ranks share the
 * host, its threads shared out (at least one a rank), and sum through the
 * host communicator; cuda ranks take GPUs 0..n_ranks-1, one each (rank 0's
 * backend must be GPU 0's), and sum through NCCL (ops/comm.h); with
 * LOOM_TP_SHARE_GPU=1 every rank is on GPU 0, summed through the host
 * (slow: for tests on a machine of one GPU).  options may
 * be NULL; its tensor_parallel is the group's and its mode LM_LOAD_MMAP (a
 * rank reads only its slices), whatever it says; its expert_parallel deals
 * a MoE model's routed experts out whole (models/rank_share.h). */
lm_status lm_tensor_parallel_open(const char *dir, const char *random_config, const lm_model_load_options *options,
                                  lm_backend *backend, int n_ranks, lm_model **out, lm_error *err);

#endif
