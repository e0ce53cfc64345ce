/* JPEG through libjpeg(-turbo) with PIL's settings: the library defaults
 * (ISLOW DCT, fancy upsampling), RGB out; CMYK converted as PIL does.
 * libjpeg reports errors through its error manager: ours formats the
 * message into the job and longjmps to the one setjmp in jpeg_run (a frame
 * with no locals), prints nothing, and turns "premature end of file" (a
 * warning to libjpeg, which would pad the image with grey) into an error,
 * as PIL refuses truncated files.  Other warnings (extraneous bytes and
 * the like) are dropped, as PIL drops them.
 *
 * Memory: markers are skipped, not saved (a marker's length is only ever
 * skipped over, and the memory source ends where the bytes do); once the
 * header is read, the size is checked, and so is what the decode will
 * hold: the RGB, and for a progressive or multi-scan file libjpeg's
 * coefficients for the whole image (2 bytes each, 64 a block), refused
 * above the limits' budget before jpeg_start_decompress allocates them.
 * libjpeg's own pool is capped at that budget as well (max_memory_to_use:
 * libjpeg-turbo has no backing store, so past it the decode fails with
 * "Backing store not supported" rather than allocating). */
#include <setjmp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

#include "io/image_codec.h"

/* A progressive file may hold any number of scans, each a pass over the
 * whole image; more than this is refused (libjpeg-turbo's own advice
 * against denial of service). */
#define MAX_SCANS 500

typedef struct {
    struct jpeg_error_mgr base; /* first: libjpeg hands us a pointer to it */
    struct jpeg_progress_mgr progress;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX + 64];
    const lm_image_limits *limits;
    uint8_t *row; /* one CMYK row */
    lm_image_rgb *out;
} jpeg_job;

static void on_error_exit(j_common_ptr cinfo) {
    jpeg_job *job = (jpeg_job *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, job->message);
    longjmp(job->jump, 1);
}

static void on_emit_message(j_common_ptr cinfo, int level) {
    if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
        jpeg_job *job = (jpeg_job *)cinfo->err;
        snprintf(job->message, sizeof job->message, "the file ends early (truncated)");
        longjmp(job->jump, 1);
    }
}

static void on_output_message(j_common_ptr cinfo) { (void)cinfo; }

static void on_progress(j_common_ptr cinfo) {
    if (!cinfo->is_decompressor) return;
    j_decompress_ptr d = (j_decompress_ptr)cinfo;
    if (d->inputctl && d->input_scan_number > MAX_SCANS) {
        jpeg_job *job = (jpeg_job *)cinfo->err;
        snprintf(job->message, sizeof job->message, "more than %d scans", MAX_SCANS);
        longjmp(job->jump, 1);
    }
}

/* PIL reads CMYK JPEGs as inverted ("CMYK;I", Adobe's convention) and
 * converts to RGB with 255 - k - c(255 - k)/255 per channel, rounded. */
static void cmyk_row_to_rgb(const uint8_t *cmyk, int width, uint8_t *rgb) {
    for (int x = 0; x < width; x++) {
        int nk = cmyk[4 * x + 3]; /* 255 - k of the inverted k */
        for (int c = 0; c < 3; c++) {
            int t = (255 - cmyk[4 * x + c]) * nk + 128;
            int v = nk - (((t >> 8) + t) >> 8);
            rgb[3 * x + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
}

static lm_status jpeg_steps(jpeg_job *job, j_decompress_ptr cinfo, const uint8_t *bytes, size_t n,
                            lm_error *err) {
    jpeg_create_decompress(cinfo);
    job->progress.progress_monitor = on_progress;
    cinfo->progress = &job->progress;
    jpeg_mem_src(cinfo, bytes, (unsigned long)n);
    jpeg_read_header(cinfo, TRUE);
    lm_status st = lm_image_check_size("JPEG", cinfo->image_width, cinfo->image_height, job->limits, err);
    if (st != LM_OK) return st;
    /* a file of more than one scan is absorbed whole into coefficient
     * arrays before the first row comes out (jdcoefct.c: each component's
     * blocks, rounded up to its sampling factors) */
    uint64_t coefficients = 0;
    if (cinfo->progressive_mode || cinfo->comps_in_scan < cinfo->num_components) {
        for (int c = 0; c < cinfo->num_components; c++) {
            const jpeg_component_info *comp = &cinfo->comp_info[c];
            uint64_t w = comp->width_in_blocks, h = comp->height_in_blocks;
            uint64_t hs = (uint64_t)comp->h_samp_factor, vs = (uint64_t)comp->v_samp_factor;
            coefficients += (w + hs - 1) / hs * hs * ((h + vs - 1) / vs * vs) * DCTSIZE2 * sizeof(JCOEF);
        }
    }
    st = lm_image_check_memory("JPEG", cinfo->image_width, cinfo->image_height, coefficients,
                               cinfo->progressive_mode ? "coefficients (progressive)" : "coefficients (multi-scan)",
                               job->limits, err);
    if (st != LM_OK) return st;
    /* libjpeg's pool, the coefficients included, within what the budget
     * leaves beside the RGB, and at least 16 MiB for its row buffers */
    uint64_t budget = lm_image_decode_budget(job->limits);
    uint64_t rgb_bytes = (uint64_t)cinfo->image_width * cinfo->image_height * 3;
    uint64_t pool = budget > rgb_bytes ? budget - rgb_bytes : 0;
    if (pool < ((uint64_t)16 << 20)) pool = (uint64_t)16 << 20;
    cinfo->mem->max_memory_to_use = (long)(pool + ((uint64_t)4 << 20));
    bool cmyk = cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK;
    cinfo->out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
    jpeg_start_decompress(cinfo);
    int width = (int)cinfo->output_width, height = (int)cinfo->output_height;
    if (cinfo->output_components != (cmyk ? 4 : 3) || width != (int)cinfo->image_width ||
        height != (int)cinfo->image_height)
        return lm_fail(err, LM_ERR_INTERNAL, "JPEG image: libjpeg gave %d components of %d x %d",
                       cinfo->output_components, width, height);
    if ((st = lm_image_alloc(width, height, job->out, err)) != LM_OK) return st;
    if (cmyk && !(job->row = malloc((size_t)width * 4)))
        return lm_fail(err, LM_ERR_NOMEM, "JPEG image: out of memory");
    while ((int)cinfo->output_scanline < height) {
        uint8_t *rgb = job->out->rgb + (size_t)cinfo->output_scanline * (size_t)width * 3;
        JSAMPROW row = cmyk ? job->row : rgb;
        if (jpeg_read_scanlines(cinfo, &row, 1) != 1)
            return lm_fail(err, LM_ERR_INVALID, "JPEG image: the file ends early (truncated)");
        if (cmyk) cmyk_row_to_rgb(job->row, width, rgb);
    }
    jpeg_finish_decompress(cinfo);
    return LM_OK;
}

static lm_status jpeg_run(jpeg_job *job, j_decompress_ptr cinfo, const uint8_t *bytes, size_t n,
                          lm_error *err) {
    if (setjmp(job->jump)) return lm_fail(err, LM_ERR_INVALID, "JPEG image: %s", job->message);
    return jpeg_steps(job, cinfo, bytes, n, err);
}

lm_status lm_image_decode_jpeg(const uint8_t *bytes, size_t n, const lm_image_limits *limits,
                               lm_image_rgb *out, lm_error *err) {
    memset(out, 0, sizeof *out);
    jpeg_job job;
    memset(&job, 0, sizeof job);
    job.limits = limits;
    job.out = out;
    struct jpeg_decompress_struct cinfo;
    memset(&cinfo, 0, sizeof cinfo);
    cinfo.err = jpeg_std_error(&job.base);
    job.base.error_exit = on_error_exit;
    job.base.emit_message = on_emit_message;
    job.base.output_message = on_output_message;
    lm_status st = jpeg_run(&job, &cinfo, bytes, n, err);
    jpeg_destroy_decompress(&cinfo); /* safe on a half-made or never-made object */
    free(job.row);
    if (st != LM_OK) lm_image_rgb_free(out);
    return st;
}
