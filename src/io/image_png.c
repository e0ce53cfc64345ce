/* PNG through libpng's classic API (the simplified png_image one applies
 * gamma to 16-bit and gAMA files, which PIL does not).  libpng reports
 * errors by longjmp: the one setjmp is in png_run, a frame with no locals
 * (the work is png_steps'), and what the steps allocate hangs off the job,
 * which lm_image_decode_png frees whatever happened.  Warnings are
 * dropped; nothing is printed. */
#include <png.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/image_codec.h"

typedef struct {
    const uint8_t *bytes;
    size_t n, pos;
    const lm_image_limits *limits;
    char message[200];
    png_bytep *rows;  /* row pointers for png_read_image */
    lm_image_rgb *out;
} png_job;

static void on_error(png_structp png, png_const_charp message) {
    png_job *job = png_get_error_ptr(png);
    snprintf(job->message, sizeof job->message, "%s", message);
    png_longjmp(png, 1);
}

static void on_warning(png_structp png, png_const_charp message) {
    (void)png;
    (void)message;
}

static void read_bytes(png_structp png, png_bytep data, size_t len) {
    png_job *job = png_get_io_ptr(png);
    if (len > job->n - job->pos) png_error(png, "the file ends early (truncated)");
    memcpy(data, job->bytes + job->pos, len);
    job->pos += len;
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* An animation control chunk (APNG) anywhere in the chunk list.  The walk
 * stops quietly where the chunks stop making sense; libpng judges those. */
static bool has_actl(const uint8_t *b, size_t n) {
    size_t pos = 8;
    while (n - pos >= 8) {
        uint32_t len = be32(b + pos);
        if (memcmp(b + pos + 4, "acTL", 4) == 0) return true;
        if (memcmp(b + pos + 4, "IEND", 4) == 0 || len > 0x7fffffffu) return false;
        if ((size_t)len + 12 > n - pos) return false;
        pos += (size_t)len + 12;
    }
    return false;
}

static lm_status png_steps(png_job *job, png_structp png, png_infop info, lm_error *err) {
    png_set_read_fn(png, job, read_bytes);
    png_set_crc_action(png, PNG_CRC_ERROR_QUIT, PNG_CRC_ERROR_QUIT);
    /* our limits, not libpng's (checked below, and before libpng runs) */
    png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
    png_set_chunk_malloc_max(png, (png_alloc_size_t)8 << 20); /* text, ICC profiles, ... */
    png_read_info(png, info);

    png_uint_32 width, height;
    int depth, color, interlace;
    png_get_IHDR(png, info, &width, &height, &depth, &color, &interlace, NULL, NULL);
    lm_status st = lm_image_check_size("PNG", width, height, job->limits, err);
    if (st != LM_OK) return st;

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
    png_read_image(png, job->rows); /* all passes when interlaced */
    /* the chunks after the image data, through IEND, with their CRCs */
    png_read_end(png, NULL);
    return LM_OK;
}

/* The setjmp, in a frame of its own with no locals for a longjmp to clobber. */
static lm_status png_run(png_job *job, png_structp png, png_infop info, lm_error *err) {
    if (setjmp(png_jmpbuf(png)))
        return lm_fail(err, LM_ERR_INVALID, "PNG image: %s", job->message);
    return png_steps(job, png, info, err);
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
    if (has_actl(bytes, n))
        return lm_fail(err, LM_ERR_INVALID, "PNG image: animated (APNG); only still images are taken");
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
