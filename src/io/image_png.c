/* PNG through libpng's classic API (the simplified png_image one applies
 * gamma to 16-bit and gAMA files, which PIL does not).  libpng reports
 * errors by longjmp: the one setjmp is in png_run, a frame with no locals
 * (the work is png_steps'), and what the steps allocate hangs off the job,
 * which lm_image_decode_png frees whatever happened.  Warnings are
 * dropped; nothing is printed.
 *
 * Nothing is allocated from a length the file declares before it is
 * checked: the chunks are walked first (each length against the bytes
 * that remain, each CRC, through IEND), libpng then skips every ancillary
 * chunk but tRNS (text, ICC profiles and the like are not decompressed,
 * nor held), and the image data is inflated only as far as the rows the
 * header declares: when libpng asks for more once the last row is made,
 * the decode stops there, complete (PIL too stops at a full image). */
#include <png.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "io/image_codec.h"

typedef struct {
    const uint8_t *bytes;
    size_t n, pos;
    const lm_image_limits *limits;
    char message[200];
    bool rows_done;   /* every row of every pass is made */
    bool interlaced;
    uint32_t height;
    png_bytep *rows;  /* row pointers for png_read_image */
    lm_image_rgb *out;
} png_job;

/* The longjmp for "the image is complete; what follows is not read". */
#define PNG_JUMP_COMPLETE 2

static void on_error(png_structp png, png_const_charp message) {
    png_job *job = png_get_error_ptr(png);
    snprintf(job->message, sizeof job->message, "%s", message);
    png_longjmp(png, 1);
}

static void on_warning(png_structp png, png_const_charp message) {
    (void)png;
    (void)message;
}

/* libpng has made the last row of the last pass once its row counter is
 * past the height (past pass 6 when interlaced, which libpng's own
 * interlace handling counts in passes of whole-height rows). */
static bool all_rows_made(png_structp png, const png_job *job) {
    if (job->interlaced) return png_get_current_pass_number(png) >= 7;
    return png_get_current_row_number(png) >= job->height;
}

static void read_bytes(png_structp png, png_bytep data, size_t len) {
    png_job *job = png_get_io_ptr(png);
    if (job->rows && all_rows_made(png, job)) {
        /* libpng wants what comes after the image's rows: the rest of the
         * zlib stream (which it would inflate to its end, however long)
         * and the chunks after it, which the walk has checked already */
        job->rows_done = true;
        png_longjmp(png, PNG_JUMP_COMPLETE);
    }
    if (len > job->n - job->pos) png_error(png, "the file ends early (truncated)");
    memcpy(data, job->bytes + job->pos, len);
    job->pos += len;
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* A chunk type for a message: its four bytes when they are letters. */
static void chunk_name(const uint8_t *type, char out[8]) {
    bool letters = true;
    for (int i = 0; i < 4; i++)
        letters = letters && ((type[i] >= 'A' && type[i] <= 'Z') || (type[i] >= 'a' && type[i] <= 'z'));
    if (letters)
        snprintf(out, 8, "'%c%c%c%c'", type[0], type[1], type[2], type[3]);
    else
        snprintf(out, 8, "?");
}

/* The chunk list from the signature through IEND: every length within
 * 2^31-1 and the bytes that remain, every CRC right; an animation control
 * chunk (APNG) anywhere is refused.  Bytes after IEND are ignored, as
 * libpng and PIL ignore them. */
static lm_status walk_chunks(const uint8_t *b, size_t n, lm_error *err) {
    size_t pos = 8;
    for (;;) {
        if (n - pos < 12)
            return lm_fail(err, LM_ERR_INVALID, "PNG image: the file ends early (truncated: no IEND chunk)");
        uint32_t len = be32(b + pos);
        char name[8];
        chunk_name(b + pos + 4, name);
        if (len > 0x7fffffffu)
            return lm_fail(err, LM_ERR_INVALID,
                           "PNG image: chunk %s at byte %zu declares %u bytes, more than the 2^31-1 a chunk may hold",
                           name, pos, len);
        if ((size_t)len > n - pos - 12)
            return lm_fail(err, LM_ERR_INVALID,
                           "PNG image: chunk %s at byte %zu declares %u bytes (and a 4-byte CRC); only %zu "
                           "follow its header (truncated or corrupt)",
                           name, pos, len, n - pos - 8);
        uLong crc = crc32(0L, b + pos + 4, 4 + len);
        if (crc != be32(b + pos + 8 + len))
            return lm_fail(err, LM_ERR_INVALID, "PNG image: chunk %s at byte %zu: CRC error", name, pos);
        if (memcmp(b + pos + 4, "acTL", 4) == 0)
            return lm_fail(err, LM_ERR_INVALID, "PNG image: animated (APNG); only still images are taken");
        if (memcmp(b + pos + 4, "IEND", 4) == 0) return LM_OK;
        pos += (size_t)len + 12;
    }
}

static lm_status png_steps(png_job *job, png_structp png, png_infop info, lm_error *err) {
    png_set_read_fn(png, job, read_bytes);
    png_set_crc_action(png, PNG_CRC_ERROR_QUIT, PNG_CRC_ERROR_QUIT);
    /* our limits, not libpng's (checked below, and before libpng runs) */
    png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
    /* every ancillary chunk but tRNS skipped, unread (no pixel depends on
     * them: no gamma, no ICC, as PIL's convert("RGB")); what libpng still
     * allocates for a chunk (PLTE, tRNS) is bounded by their sizes, and
     * this caps anything else */
    png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, NULL, -1);
    png_set_chunk_malloc_max(png, (png_alloc_size_t)1 << 20);
    png_set_chunk_cache_max(png, 64);
    png_read_info(png, info);

    png_uint_32 width, height;
    int depth, color, interlace;
    png_get_IHDR(png, info, &width, &height, &depth, &color, &interlace, NULL, NULL);
    lm_status st = lm_image_check_size("PNG", width, height, job->limits, err);
    if (st == LM_OK) st = lm_image_check_memory("PNG", width, height, 0, NULL, job->limits, err);
    if (st != LM_OK) return st;
    job->interlaced = interlace != PNG_INTERLACE_NONE;
    job->height = height;

    /* To 8-bit RGB as PIL's convert("RGB") makes it of the mode PIL opens
     * the file in: 16-bit samples keep their high byte (PIL's "RGB;16B",
     * "RGBA;16B", "LA;16B" unpackers), low bit depths scale to 0..255,
     * greyscale is replicated, palettes are looked up, and alpha (a channel,
     * or transparency from tRNS) is dropped.  No gamma. */
    if (depth == 16) png_set_strip_16(png);
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
    png_set_strip_alpha(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if (png_get_bit_depth(png, info) != 8 || png_get_channels(png, info) != 3 ||
        png_get_rowbytes(png, info) != (size_t)width * 3)
        return lm_fail(err, LM_ERR_INTERNAL, "PNG image: libpng gave %d channels of %d bits",
                       png_get_channels(png, info), png_get_bit_depth(png, info));

    if ((st = lm_image_alloc((int)width, (int)height, job->out, err)) != LM_OK) return st;
    if (!(job->rows = malloc(sizeof *job->rows * height)))
        return lm_fail(err, LM_ERR_NOMEM, "PNG image: out of memory");
    for (png_uint_32 y = 0; y < height; y++) job->rows[y] = job->out->rgb + (size_t)y * width * 3;
    /* all passes when interlaced; it returns when the zlib stream ended
     * inside the data already read, or longjmps from read_bytes */
    png_read_image(png, job->rows);
    job->rows_done = true;
    /* no png_read_end: the chunks after the image data were walked, CRCs
     * and all, and the rest of the zlib stream is not inflated */
    return LM_OK;
}

/* The setjmp, in a frame of its own with no locals for a longjmp to clobber. */
static lm_status png_run(png_job *job, png_structp png, png_infop info, lm_error *err) {
    switch (setjmp(png_jmpbuf(png))) {
    case 0: return png_steps(job, png, info, err);
    case PNG_JUMP_COMPLETE:
        if (job->rows_done) return LM_OK;
        break;
    default: break;
    }
    return lm_fail(err, LM_ERR_INVALID, "PNG image: %s", job->message);
}

lm_status lm_image_decode_png(const uint8_t *bytes, size_t n, const lm_image_limits *limits,
                              lm_image_rgb *out, lm_error *err) {
    memset(out, 0, sizeof *out);
    /* IHDR comes first (signature, length 13, "IHDR", width, height): its
     * size is judged before libpng reads on, so a file declaring a huge
     * image is refused whatever follows */
    if (n >= 24 && memcmp(bytes + 12, "IHDR", 4) == 0) {
        lm_status st = lm_image_check_size("PNG", be32(bytes + 16), be32(bytes + 20), limits, err);
        if (st != LM_OK) return st;
    }
    lm_status walked = walk_chunks(bytes, n, err);
    if (walked != LM_OK) return walked;
    png_job job = {.bytes = bytes, .n = n, .limits = limits, .out = out};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &job, on_error, on_warning);
    if (!png) return lm_fail(err, LM_ERR_NOMEM, "PNG image: out of memory");
    png_infop info = png_create_info_struct(png);
    lm_status st = info ? png_run(&job, png, info, err)
                        : lm_fail(err, LM_ERR_NOMEM, "PNG image: out of memory");
    png_destroy_read_struct(&png, info ? &info : NULL, NULL);
    free(job.rows);
    if (st != LM_OK) lm_image_rgb_free(out);
    return st;
}
