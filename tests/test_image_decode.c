/* io/image_decode: the fixture images decode to the bytes transformers saw
 * (fixtures/preprocess `<file>.decoded`), PNG variants (bit depths,
 * palettes, alpha, interlacing, 16-bit) as PIL's convert("RGB") makes
 * them, WebP and JPEG made here round-trip, and hostile input (truncated
 * at every length, bad CRCs, huge declared sizes, animation, garbage) is
 * refused with a reason and no crash; the hostile files of issue 48 (a
 * chunk declaring 2^31-1 bytes, zlib bombs, a progressive JPEG whose
 * coefficients alone are 384 MiB, image data inflating past its rows) are
 * refused, or decoded as declared, within 64 MiB and no time. */
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include <jpeglib.h>
#include <webp/decode.h>
#include <webp/encode.h>

#include "harness.h"
#include "io/image_decode.h"
#include "io/json_file.h"
#include "io/safetensors.h"

/* ---- helpers ---- */

typedef struct {
    uint8_t *data;
    size_t n, cap;
} bytes;

static bool bytes_add(bytes *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n) cap *= 2;
        uint8_t *d = realloc(b->data, cap);
        if (!d) return false;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->n, p, n);
    b->n += n;
    return true;
}

static uint32_t crc32_of(const uint8_t *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    }
    return c ^ 0xffffffffu;
}

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* A PNG chunk (length, type, data, CRC over type and data). */
static bool add_chunk(bytes *b, const char type[4], const uint8_t *data, uint32_t len) {
    uint8_t head[8];
    put_be32(head, len);
    memcpy(head + 4, type, 4);
    uint8_t *both = malloc(4 + (size_t)len);
    if (!both) return false;
    memcpy(both, type, 4);
    if (len) memcpy(both + 4, data, len);
    uint8_t crc[4];
    put_be32(crc, crc32_of(both, 4 + (size_t)len));
    free(both);
    return bytes_add(b, head, 8) && (len == 0 || bytes_add(b, data, len)) && bytes_add(b, crc, 4);
}

static const uint8_t png_signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

static bool read_fixture(const char *relative, bytes *out) {
    char path[1024];
    char *data = NULL;
    size_t n = 0;
    lm_error err;
    test_fixture_path(path, sizeof path, relative);
    if (lm_read_small_file(path, 64 << 20, &data, &n, &err) != LM_OK) {
        fprintf(stderr, "  %s\n", err.message);
        return false;
    }
    *out = (bytes){(uint8_t *)data, n, n + 1};
    return true;
}

/* Decoding must fail, leave *out empty and say why. */
static bool refused(const void *data, size_t n, const lm_image_limits *limits, lm_error *err) {
    lm_image_rgb img = {7, 7, (uint8_t *)1};
    lm_status st = lm_image_decode(data, n, limits, &img, err);
    if (st == LM_OK) {
        lm_image_rgb_free(&img);
        return false;
    }
    return img.rgb == NULL && img.width == 0 && img.height == 0 && err->message[0] != '\0';
}

/* ---- the fixture images ---- */

static void test_fixture_images_decode_exactly(void) {
    char path[1024];
    lm_error err = {0};
    lm_safetensors *ref = NULL;
    CHECK_OK(lm_safetensors_open(test_fixture_path(path, sizeof path, "preprocess/reference.safetensors"),
                                 LM_LOAD_READ, &ref, &err),
             &err);
    static const char *files[] = {"a.png", "b.jpg", "c.png", "d.png"};
    static const char *formats[] = {"png", "jpeg", "png", "png"};
    for (int i = 0; i < 4; i++) {
        char relative[64], name[64];
        snprintf(relative, sizeof relative, "preprocess/%s", files[i]);
        snprintf(name, sizeof name, "%s.decoded", files[i]);
        bytes file;
        CHECK(read_fixture(relative, &file));
        CHECK_MSG(lm_image_format(file.data, file.n) && strcmp(lm_image_format(file.data, file.n), formats[i]) == 0,
                  "%s: format %s", files[i], lm_image_format(file.data, file.n));
        free(file.data);
        lm_image_rgb img;
        lm_status st = lm_image_decode_file(test_fixture_path(path, sizeof path, relative), NULL, &img, &err);
        if (st != LM_OK) {
            lm_safetensors_close(ref);
            CHECK_MSG(false, "%s: %s", files[i], err.message);
        }
        const lm_tensor *want = lm_safetensors_find(ref, name);
        bool shape_ok = want && want->dtype == LM_DTYPE_U8 && want->n_dims == 3 && want->shape[0] == img.height &&
                        want->shape[1] == img.width && want->shape[2] == 3;
        size_t differ = 0;
        if (shape_ok)
            for (size_t j = 0; j < (size_t)img.width * img.height * 3; j++)
                differ += img.rgb[j] != ((const uint8_t *)want->data)[j];
        int w = img.width, h = img.height;
        lm_image_rgb_free(&img);
        if (!shape_ok || differ) lm_safetensors_close(ref);
        CHECK_MSG(shape_ok, "%s: decoded %d x %d, the reference is another shape", files[i], w, h);
        CHECK_MSG(differ == 0, "%s: %zu bytes differ from %s", files[i], differ, name);
    }
    lm_safetensors_close(ref);
}

static void test_limits_on_a_fixture(void) {
    bytes a, b;
    CHECK(read_fixture("preprocess/a.png", &a)); /* 300 x 200 */
    CHECK(read_fixture("preprocess/b.jpg", &b)); /* 517 x 389 */
    lm_error err = {0};
    lm_image_limits limits = lm_image_default_limits();
    lm_image_rgb img;
    limits.max_side = 299;
    bool side = refused(a.data, a.n, &limits, &err) && strstr(err.message, "on a side");
    limits = lm_image_default_limits();
    limits.max_pixels = 59999;
    bool area = refused(a.data, a.n, &limits, &err) && strstr(err.message, "pixels allowed");
    limits.max_pixels = 60000;
    bool fits = lm_image_decode(a.data, a.n, &limits, &img, &err) == LM_OK;
    lm_image_rgb_free(&img);
    limits = lm_image_default_limits();
    limits.max_bytes = a.n - 1;
    bool too_long = refused(a.data, a.n, &limits, &err);
    limits = lm_image_default_limits();
    limits.max_side = 516;
    bool jpeg_side = refused(b.data, b.n, &limits, &err) && strstr(err.message, "JPEG");
    free(a.data);
    free(b.data);
    CHECK(side && area && fits && too_long && jpeg_side);
}

/* ---- hostile PNG ---- */

static void test_png_truncated_at_every_length(void) {
    bytes a;
    CHECK(read_fixture("preprocess/a.png", &a));
    lm_error err = {0};
    size_t tried = 0, bad = (size_t)-1;
    for (size_t len = 0; len < a.n; len += len < 200 || len + 200 > a.n ? 1 : 97) {
        /* a copy of exactly len bytes, so ASan sees any read past it */
        uint8_t *prefix = malloc(len ? len : 1);
        if (len) memcpy(prefix, a.data, len);
        bool ok = refused(prefix, len, NULL, &err);
        free(prefix);
        tried++;
        if (!ok) {
            bad = len;
            break;
        }
    }
    lm_image_rgb img;
    lm_status whole = lm_image_decode(a.data, a.n, NULL, &img, &err);
    lm_image_rgb_free(&img);
    free(a.data);
    CHECK_MSG(bad == (size_t)-1, "a prefix of %zu bytes was not refused", bad);
    CHECK(whole == LM_OK && tried > 1000);
}

/* a.png with a chunk inserted after IHDR (which ends at byte 33). */
static bool with_chunk_after_ihdr(const bytes *png, const char type[4], const uint8_t *data, uint32_t len,
                                  bytes *out) {
    *out = (bytes){0};
    return bytes_add(out, png->data, 33) && add_chunk(out, type, data, len) &&
           bytes_add(out, png->data + 33, png->n - 33);
}

static void test_png_bad_crcs(void) {
    bytes a;
    CHECK(read_fixture("preprocess/a.png", &a));
    lm_error err = {0};
    CHECK(memcmp(a.data + 12, "IHDR", 4) == 0);
    /* the IHDR CRC */
    a.data[29] ^= 0x40;
    bool ihdr = refused(a.data, a.n, NULL, &err);
    a.data[29] ^= 0x40;
    /* a byte inside the image data (its chunk's CRC no longer holds) */
    size_t idat = 0;
    for (size_t i = 8; i + 8 < a.n; i++)
        if (memcmp(a.data + i, "IDAT", 4) == 0) {
            idat = i;
            break;
        }
    CHECK(idat > 0);
    a.data[idat + 40] ^= 0x01;
    bool data = refused(a.data, a.n, NULL, &err);
    a.data[idat + 40] ^= 0x01;
    /* an ancillary text chunk whose CRC is wrong */
    bytes t;
    CHECK(with_chunk_after_ihdr(&a, "tEXt", (const uint8_t *)"Comment\0hello", 13, &t));
    lm_image_rgb img;
    bool good_text = lm_image_decode(t.data, t.n, NULL, &img, &err) == LM_OK;
    lm_image_rgb_free(&img);
    t.data[33 + 8 + 13] ^= 0xff;
    bool bad_text = refused(t.data, t.n, NULL, &err);
    free(t.data);
    free(a.data);
    CHECK(ihdr && data && good_text && bad_text);
}

static void test_png_animated_refused(void) {
    bytes a, apng;
    CHECK(read_fixture("preprocess/a.png", &a));
    uint8_t actl[8] = {0, 0, 0, 2, 0, 0, 0, 0}; /* 2 frames, loop forever */
    CHECK(with_chunk_after_ihdr(&a, "acTL", actl, sizeof actl, &apng));
    lm_error err = {0};
    bool animated = refused(apng.data, apng.n, NULL, &err) && strstr(err.message, "animated");
    free(apng.data);
    free(a.data);
    CHECK_MSG(animated, "%s", err.message);
}

/* Signature, IHDR of the given size (8-bit RGB) with a valid CRC, IEND: no
 * image data at all, so a decoder that got past the size check would fail
 * on the missing data instead. */
static bytes png_header_only(uint32_t width, uint32_t height) {
    bytes b = {0};
    uint8_t ihdr[13] = {0};
    put_be32(ihdr, width);
    put_be32(ihdr + 4, height);
    ihdr[8] = 8; /* bit depth */
    ihdr[9] = 2; /* RGB */
    bytes_add(&b, png_signature, 8);
    add_chunk(&b, "IHDR", ihdr, 13);
    add_chunk(&b, "IEND", NULL, 0);
    return b;
}

static void test_png_huge_dimensions_refused_before_decoding(void) {
    lm_error err = {0};
    bytes bomb = png_header_only(30000, 30000);
    CHECK(bomb.data);
    bool area = refused(bomb.data, bomb.n, NULL, &err) && strstr(err.message, "pixels allowed");
    char area_message[LM_ERROR_MESSAGE_MAX];
    snprintf(area_message, sizeof area_message, "%s", err.message);
    free(bomb.data);
    bytes wide = png_header_only(40000, 10);
    bool side = refused(wide.data, wide.n, NULL, &err);
    free(wide.data);
    /* the same header at a size within the limits fails on the missing data */
    bytes small = png_header_only(30, 30);
    bool small_refused = refused(small.data, small.n, NULL, &err) && !strstr(err.message, "allowed");
    free(small.data);
    CHECK_MSG(area, "30000 x 30000: %s", area_message);
    CHECK(side && small_refused);
}

static void test_garbage_and_empty(void) {
    lm_error err = {0};
    uint8_t junk[4096];
    uint32_t s = 12345;
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (uint8_t)((s = s * 1103515245u + 12345u) >> 16);
    bool empty = refused(junk, 0, NULL, &err) && refused(NULL, 0, NULL, &err);
    bool garbage = refused(junk, sizeof junk, NULL, &err) && strstr(err.message, "not a PNG, JPEG or WebP");
    CHECK(lm_image_format(junk, sizeof junk) == NULL);
    /* each signature followed by junk */
    uint8_t buf[sizeof junk];
    memcpy(buf, junk, sizeof buf);
    memcpy(buf, png_signature, 8);
    bool png = refused(buf, sizeof buf, NULL, &err);
    memcpy(buf, junk, sizeof buf);
    buf[0] = 0xff, buf[1] = 0xd8, buf[2] = 0xff;
    bool jpeg = refused(buf, sizeof buf, NULL, &err);
    memcpy(buf, junk, sizeof buf);
    memcpy(buf, "RIFF", 4);
    memcpy(buf + 8, "WEBP", 4);
    bool webp = refused(buf, sizeof buf, NULL, &err);
    bool short_sigs = refused(png_signature, 8, NULL, &err) && refused("\xff\xd8\xff", 3, NULL, &err) &&
                      refused("RIFF\x04\0\0\0WEBP", 12, NULL, &err);
    CHECK(empty && garbage && png && jpeg && webp && short_sigs);
}

static void test_decode_file_errors(void) {
    lm_error err = {0};
    lm_image_rgb img;
    CHECK(lm_image_decode_file("/nonexistent/loom-image.png", NULL, &img, &err) == LM_ERR_IO);
    CHECK(img.rgb == NULL);
    char path[1024];
    lm_image_limits limits = lm_image_default_limits();
    limits.max_bytes = 1000;
    CHECK(lm_image_decode_file(test_fixture_path(path, sizeof path, "preprocess/a.png"), &limits, &img, &err) != LM_OK);
    CHECK(img.rgb == NULL && strstr(err.message, "a.png"));
}

/* ---- PNG variants, written here with libpng ---- */

typedef struct {
    int width, height, color, depth, interlace;
    const uint8_t *rows; /* packed rows as libpng wants them */
    const png_color *palette;
    int n_palette;
    const uint8_t *trans;  /* palette alpha, or NULL */
    int n_trans;
    const png_color_16 *trans_color; /* a key colour, or NULL */
} png_spec;

static void write_to_bytes(png_structp png, png_bytep data, size_t n) {
    if (!bytes_add(png_get_io_ptr(png), data, n)) png_error(png, "out of memory");
}
static void flush_nothing(png_structp png) { (void)png; }

static void write_png_steps(png_structp png, png_infop info, const png_spec *s, bytes *out) {
    png_set_write_fn(png, out, write_to_bytes, flush_nothing);
    png_set_IHDR(png, info, (png_uint_32)s->width, (png_uint_32)s->height, s->depth, s->color, s->interlace,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    if (s->palette) png_set_PLTE(png, info, s->palette, s->n_palette);
    if (s->trans || s->trans_color) png_set_tRNS(png, info, s->trans, s->n_trans, s->trans_color);
    png_write_info(png, info);
    size_t rowbytes = png_get_rowbytes(png, info);
    png_bytep rows[64];
    for (int y = 0; y < s->height && y < 64; y++) rows[y] = (png_bytep)s->rows + (size_t)y * rowbytes;
    png_write_image(png, rows);
    png_write_end(png, info);
}

static int write_png_run(png_structp png, png_infop info, const png_spec *s, bytes *out) {
    if (setjmp(png_jmpbuf(png))) return 0;
    write_png_steps(png, info, s, out);
    return 1;
}

static bytes write_png(const png_spec *s) {
    bytes out = {0};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info || !write_png_run(png, info, s, &out)) {
        free(out.data);
        out = (bytes){0};
    }
    png_destroy_write_struct(&png, &info);
    return out;
}

/* Decodes the PNG s describes and compares with want (height x width x 3). */
static bool png_decodes_to(const png_spec *s, const uint8_t *want, const char *what) {
    bytes file = write_png(s);
    if (!file.data) {
        fprintf(stderr, "  %s: could not write the PNG\n", what);
        return false;
    }
    lm_error err = {0};
    lm_image_rgb img;
    lm_status st = lm_image_decode(file.data, file.n, NULL, &img, &err);
    free(file.data);
    if (st != LM_OK) {
        fprintf(stderr, "  %s: %s\n", what, err.message);
        return false;
    }
    bool same = img.width == s->width && img.height == s->height &&
                memcmp(img.rgb, want, (size_t)s->width * s->height * 3) == 0;
    if (!same) fprintf(stderr, "  %s: decoded pixels differ\n", what);
    lm_image_rgb_free(&img);
    return same;
}

enum { VW = 13, VH = 11 };

static void test_png_variants_as_pil_converts_them(void) {
    uint8_t want[VH][VW][3], rows[VH * VW * 8];
    bool ok = true;

    /* RGBA, interlaced: alpha dropped (no compositing) */
    for (int y = 0; y < VH; y++)
        for (int x = 0; x < VW; x++) {
            uint8_t *p = rows + (y * VW + x) * 4;
            p[0] = (uint8_t)(x * 19), p[1] = (uint8_t)(y * 23), p[2] = (uint8_t)(x * y), p[3] = (uint8_t)(x * 20);
            memcpy(want[y][x], p, 3);
        }
    png_spec s = {VW, VH, PNG_COLOR_TYPE_RGB_ALPHA, 8, PNG_INTERLACE_ADAM7, rows, NULL, 0, NULL, 0, NULL};
    ok &= png_decodes_to(&s, &want[0][0][0], "RGBA interlaced");

    /* grey + alpha: grey replicated, alpha dropped */
    for (int y = 0; y < VH; y++)
        for (int x = 0; x < VW; x++) {
            uint8_t g = (uint8_t)(x * 17 + y);
            rows[(y * VW + x) * 2] = g, rows[(y * VW + x) * 2 + 1] = (uint8_t)(y * 9);
            want[y][x][0] = want[y][x][1] = want[y][x][2] = g;
        }
    s = (png_spec){VW, VH, PNG_COLOR_TYPE_GRAY_ALPHA, 8, PNG_INTERLACE_NONE, rows, NULL, 0, NULL, 0, NULL};
    ok &= png_decodes_to(&s, &want[0][0][0], "grey + alpha");

    /* 1-bit and 4-bit grey: scaled to 0..255 */
    for (int depth = 1; depth <= 4; depth *= 4) {
        int per_byte = 8 / depth, maxv = (1 << depth) - 1, rowbytes = (VW + per_byte - 1) / per_byte;
        memset(rows, 0, sizeof rows);
        for (int y = 0; y < VH; y++)
            for (int x = 0; x < VW; x++) {
                int v = (x + 2 * y) % (maxv + 1);
                int shift = 8 - depth * (x % per_byte + 1);
                rows[y * rowbytes + x / per_byte] |= (uint8_t)(v << shift);
                want[y][x][0] = want[y][x][1] = want[y][x][2] = (uint8_t)(v * 255 / maxv);
            }
        s = (png_spec){VW, VH, PNG_COLOR_TYPE_GRAY, depth, PNG_INTERLACE_NONE, rows, NULL, 0, NULL, 0, NULL};
        ok &= png_decodes_to(&s, &want[0][0][0], depth == 1 ? "1-bit grey" : "4-bit grey");
    }

    /* palette with transparency: the palette's colours, transparency ignored */
    png_color palette[5] = {{10, 20, 30}, {250, 0, 0}, {0, 250, 0}, {1, 2, 3}, {200, 201, 202}};
    uint8_t alpha[5] = {0, 128, 255, 7, 0};
    for (int y = 0; y < VH; y++)
        for (int x = 0; x < VW; x++) {
            int i = (x * 3 + y) % 5;
            rows[y * VW + x] = (uint8_t)i;
            want[y][x][0] = palette[i].red, want[y][x][1] = palette[i].green, want[y][x][2] = palette[i].blue;
        }
    s = (png_spec){VW, VH, PNG_COLOR_TYPE_PALETTE, 8, PNG_INTERLACE_NONE, rows, palette, 5, alpha, 5, NULL};
    ok &= png_decodes_to(&s, &want[0][0][0], "palette + tRNS");

    /* RGB with a transparent key colour: unchanged */
    png_color_16 key = {0, 5, 6, 7, 0};
    for (int y = 0; y < VH; y++)
        for (int x = 0; x < VW; x++) {
            uint8_t *p = rows + (y * VW + x) * 3;
            p[0] = (uint8_t)(x < 3 ? 5 : x * 11), p[1] = (uint8_t)(x < 3 ? 6 : y), p[2] = 7;
            memcpy(want[y][x], p, 3);
        }
    s = (png_spec){VW, VH, PNG_COLOR_TYPE_RGB, 8, PNG_INTERLACE_NONE, rows, NULL, 0, NULL, 0, &key};
    ok &= png_decodes_to(&s, &want[0][0][0], "RGB + key colour");

    /* 16-bit RGB and 16-bit grey: the high byte of each sample */
    for (int y = 0; y < VH; y++)
        for (int x = 0; x < VW; x++) {
            uint8_t *p = rows + (y * VW + x) * 6;
            for (int c = 0; c < 3; c++) {
                p[2 * c] = (uint8_t)(x * 20 + c * 7 + y), p[2 * c + 1] = (uint8_t)(255 - x);
                want[y][x][c] = p[2 * c];
            }
        }
    s = (png_spec){VW, VH, PNG_COLOR_TYPE_RGB, 16, PNG_INTERLACE_NONE, rows, NULL, 0, NULL, 0, NULL};
    ok &= png_decodes_to(&s, &want[0][0][0], "16-bit RGB");
    for (int y = 0; y < VH; y++)
        for (int x = 0; x < VW; x++) {
            rows[(y * VW + x) * 2] = (uint8_t)(x * 19 + y), rows[(y * VW + x) * 2 + 1] = 0x80;
            want[y][x][0] = want[y][x][1] = want[y][x][2] = (uint8_t)(x * 19 + y);
        }
    s = (png_spec){VW, VH, PNG_COLOR_TYPE_GRAY, 16, PNG_INTERLACE_ADAM7, rows, NULL, 0, NULL, 0, NULL};
    ok &= png_decodes_to(&s, &want[0][0][0], "16-bit grey interlaced");
    CHECK(ok);
}

/* ---- WebP ---- */

static void test_webp_round_trip_and_hostile(void) {
    enum { W = 37, H = 23 };
    uint8_t rgb[H][W][3], rgba[H][W][4];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            rgb[y][x][0] = (uint8_t)(x * 7), rgb[y][x][1] = (uint8_t)(y * 11), rgb[y][x][2] = (uint8_t)(x ^ y);
            memcpy(rgba[y][x], rgb[y][x], 3);
            rgba[y][x][3] = (uint8_t)(1 + x * 6); /* 0 would let the encoder change the RGB under it */
        }
    uint8_t *lossless = NULL, *with_alpha = NULL;
    size_t n = WebPEncodeLosslessRGB(&rgb[0][0][0], W, H, W * 3, &lossless);
    size_t n_alpha = WebPEncodeLosslessRGBA(&rgba[0][0][0], W, H, W * 4, &with_alpha);
    CHECK(n > 12 && n_alpha > 12);
    lm_error err = {0};
    lm_image_rgb img = {0}, img_alpha = {0};
    const char *format = lm_image_format(lossless, n);
    lm_status st = lm_image_decode(lossless, n, NULL, &img, &err);
    lm_status st_alpha = lm_image_decode(with_alpha, n_alpha, NULL, &img_alpha, &err);
    bool same = st == LM_OK && img.width == W && img.height == H && memcmp(img.rgb, rgb, sizeof rgb) == 0;
    /* alpha dropped: the same RGB */
    bool same_alpha = st_alpha == LM_OK && img_alpha.width == W && memcmp(img_alpha.rgb, rgb, sizeof rgb) == 0;
    lm_image_rgb_free(&img);
    lm_image_rgb_free(&img_alpha);
    /* every prefix refused */
    size_t bad = (size_t)-1;
    for (size_t len = 0; len < n; len++) {
        uint8_t *prefix = malloc(len ? len : 1);
        if (len) memcpy(prefix, lossless, len);
        bool ok = refused(prefix, len, NULL, &err);
        free(prefix);
        if (!ok) {
            bad = len;
            break;
        }
    }
    /* the size check */
    lm_image_limits limits = lm_image_default_limits();
    limits.max_side = W - 1;
    bool limited = refused(lossless, n, &limits, &err) && strstr(err.message, "WebP");
    WebPFree(lossless);
    WebPFree(with_alpha);
    CHECK(format && strcmp(format, "webp") == 0);
    CHECK_MSG(same, "lossless WebP: %s", st == LM_OK ? "pixels differ" : err.message);
    CHECK(same_alpha);
    CHECK_MSG(bad == (size_t)-1, "a WebP prefix of %zu bytes was not refused", bad);
    CHECK(limited);
}

static void test_webp_animated_refused(void) {
    /* RIFF / WEBP / VP8X with the animation flag (canvas 16 x 16) / ANIM */
    bytes b = {0};
    uint8_t vp8x[8 + 10] = {'V', 'P', '8', 'X', 10, 0, 0, 0, 0x02, 0, 0, 0, 15, 0, 0, 15, 0, 0};
    uint8_t anim[8 + 6] = {'A', 'N', 'I', 'M', 6, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    uint32_t riff_size = 4 + sizeof vp8x + sizeof anim;
    uint8_t head[12] = {'R', 'I', 'F', 'F', (uint8_t)riff_size, 0, 0, 0, 'W', 'E', 'B', 'P'};
    CHECK(bytes_add(&b, head, 12) && bytes_add(&b, vp8x, sizeof vp8x) && bytes_add(&b, anim, sizeof anim));
    lm_error err = {0};
    bool animated = refused(b.data, b.n, NULL, &err) && strstr(err.message, "animated");
    free(b.data);
    CHECK_MSG(animated, "%s", err.message);
}

/* ---- JPEG ---- */

static void test_jpeg_truncated_at_every_length(void) {
    bytes b;
    CHECK(read_fixture("preprocess/b.jpg", &b));
    lm_error err = {0};
    size_t bad = (size_t)-1, tried = 0;
    for (size_t len = 0; len < b.n; len += len < 700 || len + 200 > b.n ? 1 : 89) {
        uint8_t *prefix = malloc(len ? len : 1);
        if (len) memcpy(prefix, b.data, len);
        bool ok = refused(prefix, len, NULL, &err);
        free(prefix);
        tried++;
        if (!ok) {
            bad = len;
            break;
        }
    }
    free(b.data);
    CHECK_MSG(bad == (size_t)-1, "a JPEG prefix of %zu bytes was not refused", bad);
    CHECK(tried > 1000);
}

/* A W x H JPEG of one colour in the given colour space (3 or 4 components). */
static bytes solid_jpeg(J_COLOR_SPACE space, int components, const uint8_t *colour, int w, int h) {
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    c.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&c);
    unsigned char *mem = NULL;
    unsigned long size = 0;
    jpeg_mem_dest(&c, &mem, &size);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = components;
    c.in_color_space = space;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 95, TRUE);
    jpeg_start_compress(&c, TRUE);
    uint8_t row[64 * 4];
    for (int x = 0; x < w; x++) memcpy(row + x * components, colour, (size_t)components);
    while (c.next_scanline < c.image_height) {
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    bytes out = {0};
    bytes_add(&out, mem, size);
    free(mem);
    return out;
}

static bool jpeg_solid_decodes_near(const bytes *file, const uint8_t want[3], int tolerance, const char *what) {
    lm_error err = {0};
    lm_image_rgb img;
    if (lm_image_decode(file->data, file->n, NULL, &img, &err) != LM_OK) {
        fprintf(stderr, "  %s: %s\n", what, err.message);
        return false;
    }
    int worst = 0;
    for (size_t i = 0; i < (size_t)img.width * img.height * 3; i++) {
        int d = abs((int)img.rgb[i] - want[i % 3]);
        if (d > worst) worst = d;
    }
    lm_image_rgb_free(&img);
    if (worst > tolerance) fprintf(stderr, "  %s: off by %d\n", what, worst);
    return worst <= tolerance;
}

static void test_jpeg_grey_and_cmyk(void) {
    uint8_t grey = 77, white[3] = {255, 255, 255}, magenta[3] = {255, 0, 255}, grey3[3] = {77, 77, 77};
    bytes g = solid_jpeg(JCS_GRAYSCALE, 1, &grey, 24, 16);
    /* stored as Adobe writes CMYK (inverted): 255 = no ink.  PIL reads it
     * as "CMYK;I" and converts: no ink is white, full magenta ink is
     * magenta */
    uint8_t no_ink[4] = {255, 255, 255, 255}, magenta_ink[4] = {255, 0, 255, 255};
    bytes c0 = solid_jpeg(JCS_CMYK, 4, no_ink, 24, 16);
    bytes c1 = solid_jpeg(JCS_CMYK, 4, magenta_ink, 24, 16);
    bool ok = g.data && c0.data && c1.data && jpeg_solid_decodes_near(&g, grey3, 0, "grey JPEG") &&
              jpeg_solid_decodes_near(&c0, white, 1, "CMYK JPEG, no ink") &&
              jpeg_solid_decodes_near(&c1, magenta, 2, "CMYK JPEG, magenta");
    free(g.data);
    free(c0.data);
    free(c1.data);
    CHECK(ok);
}

/* ---- hostile files built here: allocation bounded before decoding ---- */

/* The decode of (data, n) in a child process: its status, its message and
 * how far its address space grew past what it started with (VmPeak less
 * the VmSize at the fork, KiB), so that an allocation made and never
 * touched (a 2 GiB malloc for a chunk that is not there) counts too.
 * Under ASan the growth is not measured (its allocator reserves memory
 * its own way): -1. */
typedef struct {
    int status;
    long grew_kib;
    char message[LM_ERROR_MESSAGE_MAX];
} child_decode;

static long status_kib(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long v = -1;
    size_t k = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, k) == 0 && line[k] == ':') {
            v = strtol(line + k + 1, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

#if defined(__SANITIZE_ADDRESS__)
#define MEASURES_MEMORY 0
#else
#define MEASURES_MEMORY 1
#endif

static bool decode_in_child(const void *data, size_t n, const lm_image_limits *limits, child_decode *out) {
    memset(out, 0, sizeof *out);
    int fds[2];
    if (pipe(fds) != 0) return false;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return false;
    if (pid == 0) {
        close(fds[0]);
        child_decode r = {0};
        long start = status_kib("VmSize");
        lm_image_rgb img = {0};
        lm_error err = {0};
        r.status = (int)lm_image_decode(data, n, limits, &img, &err);
        lm_image_rgb_free(&img);
        r.grew_kib = MEASURES_MEMORY ? status_kib("VmPeak") - start : -1;
        snprintf(r.message, sizeof r.message, "%s", r.status == LM_OK ? "" : err.message);
        ssize_t w = write(fds[1], &r, sizeof r);
        _exit(w == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fds[1]);
    ssize_t got = read(fds[0], out, sizeof *out);
    close(fds[0]);
    int wstatus = 0;
    waitpid(pid, &wstatus, 0);
    return got == (ssize_t)sizeof *out && WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
}

/* 64 MiB: the most one image may cost beyond idle (issue 48). */
#define IMAGE_MEMORY_BOUND_KIB (64L << 10)

/* Refused, saying `words`, within the memory bound. */
static bool refused_cheaply(const bytes *file, const lm_image_limits *limits, const char *words, const char *what) {
    child_decode r;
    if (!decode_in_child(file->data, file->n, limits, &r)) {
        fprintf(stderr, "  %s: the child decoding it died\n", what);
        return false;
    }
    bool ok = r.status != LM_OK && strstr(r.message, words) && r.grew_kib < IMAGE_MEMORY_BOUND_KIB;
    if (!ok || getenv("LOOM_TEST_VERBOSE"))
        fprintf(stderr, "  %s: status %d, address space %s%.1f MiB: %s\n", what, r.status,
                r.grew_kib < 0 ? "(not measured) " : "+", r.grew_kib < 0 ? 0.0 : r.grew_kib / 1024.0,
                r.status == LM_OK ? "decoded" : r.message);
    return ok;
}

static bytes png_ihdr_only_start(uint32_t width, uint32_t height, int depth, int color) {
    bytes b = {0};
    uint8_t ihdr[13] = {0};
    put_be32(ihdr, width);
    put_be32(ihdr + 4, height);
    ihdr[8] = (uint8_t)depth;
    ihdr[9] = (uint8_t)color;
    bytes_add(&b, png_signature, 8);
    add_chunk(&b, "IHDR", ihdr, 13);
    return b;
}

/* 141 bytes: a 1 x 1 PNG's signature and IHDR, then a chunk of the given
 * type declaring `declared` bytes of which 100 are there, and no more. */
static bytes png_chunk_bomb(const char type[4], uint32_t declared) {
    bytes b = png_ihdr_only_start(1, 1, 8, 2);
    uint8_t head[8], body[100];
    put_be32(head, declared);
    memcpy(head + 4, type, 4);
    memset(body, 'x', sizeof body);
    memcpy(body, "Comment\0\0", 9); /* a keyword, then zTXt's method byte */
    bytes_add(&b, head, 8);
    bytes_add(&b, body, sizeof body);
    return b;
}

static void test_png_chunk_lengths_checked_before_allocation(void) {
    /* a tEXt or zTXt chunk declaring 2^31-1 bytes made libpng allocate
     * 2 GiB before it found the file short (issue 48) */
    static const char *types[] = {"tEXt", "zTXt", "iTXt", "iCCP", "sPLT", "eXIf", "abCd", "IDAT"};
    bool ok = true;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        bytes b = png_chunk_bomb(types[i], 0x7fffffffu);
        CHECK(b.n == 141);
        char what[64];
        snprintf(what, sizeof what, "141-byte PNG, %s of 2^31-1 bytes", types[i]);
        ok = refused_cheaply(&b, NULL, "declares 2147483647 bytes", what) && ok;
        free(b.data);
    }
    /* over 2^31-1, and a length that fits the file but not what remains of it */
    bytes huge = png_chunk_bomb("tEXt", 0xffffffffu);
    ok = refused_cheaply(&huge, NULL, "2^31-1", "tEXt of 2^32-1 bytes") && ok;
    free(huge.data);
    bytes short_one = png_chunk_bomb("tEXt", 101);
    ok = refused_cheaply(&short_one, NULL, "declares 101 bytes (and a 4-byte CRC); only 100 follow", "tEXt one byte short") && ok;
    free(short_one.data);
    CHECK(ok);
}

/* side x side 1-bit grey, every pixel 0: the rows are a run of zeros that
 * deflate about 1000 to 1 (8192: 8 MiB of rows in 8 KB), which decode to
 * side^2 * 3 bytes of RGB. */
static bytes png_zlib_bomb(uint32_t side) {
    bytes b = png_ihdr_only_start(side, side, 1, 0);
    size_t raw_n = (size_t)side * (1 + side / 8);
    uint8_t *raw = calloc(raw_n, 1);
    uLongf z_n = compressBound((uLong)raw_n);
    uint8_t *z = malloc(z_n);
    bool ok = raw && z && compress2(z, &z_n, raw, (uLong)raw_n, 9) == Z_OK;
    if (ok) ok = add_chunk(&b, "IDAT", z, (uint32_t)z_n) && add_chunk(&b, "IEND", NULL, 0);
    free(raw);
    free(z);
    if (!ok) {
        free(b.data);
        b = (bytes){0};
    }
    return b;
}

static void test_png_zlib_bomb_refused_before_decoding(void) {
    bytes big = png_zlib_bomb(8192), edge = png_zlib_bomb(4096);
    CHECK(big.data && edge.data && big.n < 16384);
    /* 8192 x 8192 decoded to 192 MiB of RGB (issue 48) */
    bool refused_big = refused_cheaply(&big, NULL, "pixels allowed (--max-image-decode-pixels)", "PNG bomb 8192 x 8192");
    /* 4096 x 4096 is the largest allowed: decoded, in 48 MiB and its rows */
    child_decode r;
    bool ran = decode_in_child(edge.data, edge.n, NULL, &r);
    free(big.data);
    free(edge.data);
    CHECK(refused_big);
    if (getenv("LOOM_TEST_VERBOSE")) fprintf(stderr, "  PNG bomb 4096 x 4096: +%.1f MiB\n", r.grew_kib / 1024.0);
    CHECK_MSG(ran && r.status == LM_OK && r.grew_kib < IMAGE_MEMORY_BOUND_KIB,
              "PNG bomb 4096 x 4096: status %d, +%.1f MiB: %s", r.status, r.grew_kib / 1024.0, r.message);
}

/* A 1 x 1 RGB PNG whose zlib stream goes on past its 4 bytes of rows to
 * `extra_mib` MiB of zeros (a deflate block of 1 MiB of zeros, flushed,
 * repeated: about 1 KB a MiB), with a right Adler-32. */
static bytes png_trailing_bomb(int extra_mib) {
    bytes b = png_ihdr_only_start(1, 1, 8, 2);
    size_t mib = (size_t)1 << 20;
    uint8_t *zeros = calloc(mib + 4, 1), *block = malloc(mib);
    bytes stream = {0};
    z_stream z;
    memset(&z, 0, sizeof z);
    bool ok = zeros && block && deflateInit2(&z, 9, Z_DEFLATED, -15, 9, Z_DEFAULT_STRATEGY) == Z_OK;
    uLong adler = adler32(0L, Z_NULL, 0);
    const uint8_t header[2] = {0x78, 0xda};
    ok = ok && bytes_add(&stream, header, 2);
    for (int i = 0; ok && i < 2; i++) {
        /* the first block holds the 4 bytes of the image too; the second,
         * a MiB of zeros after a full flush, is the one repeated */
        size_t in = i == 0 ? mib + 4 : mib;
        z.next_in = zeros;
        z.avail_in = (uInt)in;
        z.next_out = block;
        z.avail_out = (uInt)mib;
        ok = deflate(&z, Z_FULL_FLUSH) == Z_OK && z.avail_in == 0;
        size_t made = mib - z.avail_out;
        for (int k = 0; ok && k < (i == 0 ? 1 : extra_mib - 1); k++) {
            ok = bytes_add(&stream, block, made);
            adler = adler32_combine(adler, adler32(adler32(0L, Z_NULL, 0), zeros, (uInt)in), (z_off_t)in);
        }
    }
    z.next_in = zeros;
    z.avail_in = 0;
    z.next_out = block;
    z.avail_out = (uInt)mib;
    ok = ok && deflate(&z, Z_FINISH) == Z_STREAM_END && bytes_add(&stream, block, mib - z.avail_out);
    deflateEnd(&z);
    uint8_t tail[4];
    put_be32(tail, (uint32_t)adler);
    ok = ok && bytes_add(&stream, tail, 4) && add_chunk(&b, "IDAT", stream.data, (uint32_t)stream.n) &&
         add_chunk(&b, "IEND", NULL, 0);
    free(zeros);
    free(block);
    free(stream.data);
    if (!ok) {
        free(b.data);
        b = (bytes){0};
    }
    return b;
}

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static void test_png_inflated_only_as_far_as_its_rows(void) {
    /* libpng swallowed the rest of the stream after the last row: 1 GiB
     * of zeros in 1 MB took seconds to inflate */
    bytes b = png_trailing_bomb(1024);
    CHECK(b.data && b.n < (2u << 20));
    lm_error err = {0};
    lm_image_rgb img = {0};
    double t0 = cpu_seconds();
    lm_status st = lm_image_decode(b.data, b.n, NULL, &img, &err);
    double took = cpu_seconds() - t0;
    bool pixel = st == LM_OK && img.width == 1 && img.height == 1 && img.rgb[0] == 0 && img.rgb[2] == 0;
    lm_image_rgb_free(&img);
    free(b.data);
    CHECK_MSG(pixel, "1 x 1 PNG with 1 GiB more data: %s", st == LM_OK ? "wrong pixel" : err.message);
    CHECK_MSG(took < 0.25, "1 x 1 PNG with 1 GiB more data took %.2f s of CPU to decode", took);
}

/* A progressive JPEG of w x h, three components at 4:4:4, of one DC scan
 * whose every difference is zero (a one-bit Huffman code per block, no AC
 * scans): a valid mid-grey image in 3 * w * h / 512 bytes whose decoder
 * holds 2 bytes a coefficient for the whole image (384 MiB at 8192). */
static bytes jpeg_progressive_bomb(int w, int h) {
    bytes b = {0};
    const uint8_t soi[2] = {0xff, 0xd8}, eoi[2] = {0xff, 0xd9};
    uint8_t dqt[4 + 1 + 64] = {0xff, 0xdb, 0, 67, 0};
    memset(dqt + 5, 1, 64);
    uint8_t sof[4 + 6 + 9] = {0xff, 0xc2, 0, 17, 8, (uint8_t)(h >> 8), (uint8_t)h, (uint8_t)(w >> 8), (uint8_t)w, 3};
    for (int c = 0; c < 3; c++) sof[10 + 3 * c] = (uint8_t)(c + 1), sof[11 + 3 * c] = 0x11, sof[12 + 3 * c] = 0;
    uint8_t dht[4 + 1 + 16 + 1] = {0xff, 0xc4, 0, 20, 0x00, 1}; /* DC table 0: symbol 0, code '0' */
    uint8_t sos[4 + 1 + 6 + 3] = {0xff, 0xda, 0, 12, 3, 1, 0, 2, 0, 3, 0, 0, 0, 0};
    size_t blocks = (size_t)3 * (size_t)((w + 7) / 8) * (size_t)((h + 7) / 8);
    uint8_t *data = calloc((blocks + 7) / 8, 1);
    bool ok = data && bytes_add(&b, soi, 2) && bytes_add(&b, dqt, sizeof dqt) && bytes_add(&b, sof, sizeof sof) &&
              bytes_add(&b, dht, sizeof dht) && bytes_add(&b, sos, sizeof sos) &&
              bytes_add(&b, data, (blocks + 7) / 8) && bytes_add(&b, eoi, 2);
    if (data && blocks % 8) b.data[b.n - 3] = (uint8_t)(0xff >> (blocks % 8)); /* pad with 1 bits */
    free(data);
    if (!ok) {
        free(b.data);
        b = (bytes){0};
    }
    return b;
}

static void test_jpeg_progressive_memory_judged_before_decoding(void) {
    bytes big = jpeg_progressive_bomb(8192, 8192), edge = jpeg_progressive_bomb(4096, 4096),
          small = jpeg_progressive_bomb(1024, 512);
    CHECK(big.data && edge.data && small.data);
    /* 8192 x 8192: 384 MiB of coefficients and 192 of RGB (issue 48) */
    bool ok = refused_cheaply(&big, NULL, "pixels allowed", "progressive JPEG 8192 x 8192");
    /* 4096 x 4096 is within the pixel cap, not its 96 MiB of coefficients */
    ok = refused_cheaply(&edge, NULL, "coefficients (progressive)", "progressive JPEG 4096 x 4096") && ok;
    /* 1024 x 512: 3 MiB of coefficients and 1.5 of RGB, decoded to grey;
     * refused under a budget of 4 MiB, decoded with 4.5 */
    lm_error err = {0};
    lm_image_rgb img = {0};
    lm_status st = lm_image_decode(small.data, small.n, NULL, &img, &err);
    bool grey = st == LM_OK && img.width == 1024 && img.height == 512;
    for (size_t i = 0; grey && i < (size_t)1024 * 512 * 3; i++) grey = img.rgb[i] == 128;
    lm_image_rgb_free(&img);
    lm_image_limits limits = lm_image_default_limits();
    limits.max_decode_bytes = (size_t)4 << 20;
    bool tight = refused(small.data, small.n, &limits, &err) && strstr(err.message, "4.5 MiB to decode");
    limits.max_decode_bytes = (size_t)9 << 19;
    bool room = lm_image_decode(small.data, small.n, &limits, &img, &err) == LM_OK;
    lm_image_rgb_free(&img);
    /* a marker whose length runs past the end of the file is refused, not
     * skipped into memory that is not there */
    const uint8_t app1[] = {0xff, 0xd8, 0xff, 0xe1, 0xff, 0xff, 'E', 'x', 'i', 'f', 0, 0};
    bool marker = refused(app1, sizeof app1, NULL, &err) && strstr(err.message, "truncated");
    free(big.data);
    free(edge.data);
    free(small.data);
    CHECK(ok);
    CHECK_MSG(grey, "progressive 1024 x 512: %s", st == LM_OK ? "not grey" : err.message);
    CHECK(tight && room && marker);
}

static void test_webp_lossless_memory_judged_before_decoding(void) {
    /* a lossless WebP keeps 4 bytes a pixel of ARGB beside our 3 of RGB */
    enum { W = 512, H = 256 };
    uint8_t *rgb = calloc((size_t)W * H * 3, 1), *file = NULL;
    CHECK(rgb);
    size_t n = WebPEncodeLosslessRGB(rgb, W, H, W * 3, &file);
    free(rgb);
    CHECK(n > 12);
    lm_error err = {0};
    lm_image_rgb img = {0};
    lm_image_limits limits = lm_image_default_limits();
    limits.max_pixels = (int64_t)W * H; /* a budget of 384 KiB: the RGB alone */
    bool tight = refused(file, n, &limits, &err) && strstr(err.message, "ARGB (lossless)");
    char message[LM_ERROR_MESSAGE_MAX];
    snprintf(message, sizeof message, "%s", err.message);
    limits.max_decode_bytes = (size_t)W * H * 7;
    bool room = lm_image_decode(file, n, &limits, &img, &err) == LM_OK && img.width == W;
    lm_image_rgb_free(&img);
    WebPFree(file);
    CHECK_MSG(tight, "lossless WebP over its budget: %s", message);
    CHECK(room);
}

int main(void) {
    RUN_TEST(test_fixture_images_decode_exactly);
    RUN_TEST(test_limits_on_a_fixture);
    RUN_TEST(test_png_truncated_at_every_length);
    RUN_TEST(test_png_bad_crcs);
    RUN_TEST(test_png_animated_refused);
    RUN_TEST(test_png_huge_dimensions_refused_before_decoding);
    RUN_TEST(test_garbage_and_empty);
    RUN_TEST(test_decode_file_errors);
    RUN_TEST(test_png_variants_as_pil_converts_them);
    RUN_TEST(test_webp_round_trip_and_hostile);
    RUN_TEST(test_webp_animated_refused);
    RUN_TEST(test_jpeg_truncated_at_every_length);
    RUN_TEST(test_jpeg_grey_and_cmyk);
    RUN_TEST(test_png_chunk_lengths_checked_before_allocation);
    RUN_TEST(test_png_zlib_bomb_refused_before_decoding);
    RUN_TEST(test_png_inflated_only_as_far_as_its_rows);
    RUN_TEST(test_jpeg_progressive_memory_judged_before_decoding);
    RUN_TEST(test_webp_lossless_memory_judged_before_decoding);
    return test_summary("test_image_decode");
}
