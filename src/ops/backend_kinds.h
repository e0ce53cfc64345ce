/* What ops/backend.c needs of each backend to create, destroy and describe
 * it by name.  Private to src/ops. */
#ifndef LOOM_OPS_BACKEND_KINDS_H
#define LOOM_OPS_BACKEND_KINDS_H

#include "ops/ops.h"

struct lm_comm;

/* A cpu backend runs the op table of its kernel set (ops/cpu/cpu_kernels.h):
 * whether be is one. */
bool lm_cpu_backend_owns(const lm_backend *be);
void lm_cpu_backend_destroy(lm_backend *be);
int lm_cpu_backend_threads(const lm_backend *be);

extern const lm_backend_ops lm_ref_backend_ops;
void lm_ref_backend_destroy(lm_backend *be);

#ifdef LOOM_HAVE_CUDA
extern const lm_backend_ops lm_cuda_backend_ops;
lm_status lm_backend_cuda_create(int device, lm_backend **out, lm_error *err);
void lm_cuda_backend_destroy(lm_backend *be);
int lm_cuda_device_count(void);
int lm_cuda_backend_device(const lm_backend *be); /* the GPU it runs on */
/* NCCL communicators for cuda backends on distinct devices (nccl_comm.cu):
 * comms[r] is ranks[r]'s; *group frees them (lm_cuda_comm_group_destroy). */
lm_status lm_cuda_comm_group_create(lm_backend *const *ranks, int n_ranks, struct lm_comm **comms, void **group,
                                    lm_error *err);
void lm_cuda_comm_group_destroy(void *group);
#endif

/* The names of the ops a table leaves NULL, comma-separated into buf;
 * returns how many (0: complete). */
int lm_backend_missing_ops(const lm_backend_ops *ops, char *buf, size_t size);

#endif
