/* Writing safetensors files, for tests that make checkpoints out of other
 * checkpoints (tests/test_expert_layouts.c re-saves a fixture with its
 * experts in the other layout).  The format io/safetensors.h reads: an
 * 8-byte little-endian header length N, N bytes of JSON ({"name": {"dtype",
 * "shape", "data_offsets"}} plus "__metadata__": {"format": "pt"}) padded
 * with spaces to a multiple of 8, then the tensors' bytes in the order they
 * were added.
 *
 * A tensor's data is given as pieces (pointer, size) that are concatenated
 * verbatim when the file is written: a fused tensor can be made of
 * per-expert tensors, and a per-expert tensor can be a slice of a fused one,
 * with no copies and no conversion.  The pieces are not copied: they must
 * stay valid until test_st_writer_write returns. */
#ifndef LOOM_TESTS_SAFETENSORS_WRITER_H
#define LOOM_TESTS_SAFETENSORS_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/error.h"
#include "io/safetensors.h"

typedef struct {
    const void *data;
    size_t n_bytes;
} test_st_piece;

typedef struct test_st_writer test_st_writer;

lm_status test_st_writer_create(test_st_writer **out, lm_error *err);
void test_st_writer_free(test_st_writer *w);

/* Adds tensor `name` (copied) of dtype and shape whose bytes are the pieces
 * in order; the pieces must add up to the shape's size exactly.  A name
 * already added is refused (LM_ERR_INVALID). */
lm_status test_st_writer_add(test_st_writer *w, const char *name, lm_dtype dtype, int n_dims,
                             const int64_t *shape, const test_st_piece *pieces, int n_pieces,
                             lm_error *err);
/* Adds a tensor read from a file, unchanged, under its own name. */
lm_status test_st_writer_add_tensor(test_st_writer *w, const lm_tensor *t, lm_error *err);

size_t test_st_writer_count(const test_st_writer *w);
const char *test_st_writer_name(const test_st_writer *w, size_t i); /* in the order added */

/* Writes the file at path (replacing it). */
lm_status test_st_writer_write(const test_st_writer *w, const char *path, lm_error *err);

#endif
