#!/usr/bin/env bash
# A bounded libFuzzer run of fuzz/fuzz_image (ASan+UBSan): image decoding
# (PNG, JPEG, WebP) with small limits and preprocessing of what decodes,
# seeded with the fixture images, two small WebP files and the hostile
# files of issue 48 (chunk-length and zlib bombs, progressive JPEGs), with
# a dictionary of chunk names and markers, in 512 MB and no allocation
# over 64 MB.  Fails on any crash, sanitizer report, timeout, running out
# of memory, allocation over the limit or broken invariant.
# Skipped (0 passed, 0 failed) when the fuzz build is absent (`make
# fuzzers` builds it; `make test` does).  LOOM_FUZZ_SECONDS sets the
# length (default 15).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
fixtures=${LOOM_FIXTURES:-$root/tests/fixtures}
data=${LOOM_TEST_DATA:-tests/data}
name=test_image_fuzz.sh
. tests/fuzz_runner.sh
fuzz_prepare fuzz_image
n=0
for f in "$fixtures"/preprocess/*.png "$fixtures"/preprocess/*.jpg "$fixtures"/models/*/image0.png \
         "$data"/glm-shapes/*/image0.png; do
    [ -f "$f" ] && cp "$f" "$work/corpus/seed$n" && n=$((n + 1))
done
if [ "$n" -lt 4 ]; then
    fuzz_seed_failed "fewer than 4 seed images found under $fixtures"
fi
# lossless 8 x 6 with alpha, lossy 16 x 16 (made with libwebp's encoder)
xxd -r -p > "$work/corpus/webp0" <<'HEX'
5249464648000000574542505650384c3c0000002f07400110993244f43f3611d1ff702868db462a9cf1c778209afb321e6adbb66140ff7f6dc68a61cfa6eb205e84889768015c0656c40b44290cc48a
HEX
xxd -r -p > "$work/corpus/webp1" <<'HEX'
524946465a00000057454250565038204e000000f001009d012a1000100001402625b00274ba0003082e2f8000fefea9e52040ead6d23ff13e8f1b0daf9d697af469efe57999394bc3ff7929d3f30778cf575ff43ad7769ff879df8b7b9ec0000000
HEX
# the hostile files of issue 48, at the fuzzer's scale (its limits: 2^18
# pixels, so 768 KiB of decode): chunks declaring 2^31-1 bytes, zlib bombs
# over and at the pixel cap, image data inflating past its rows, and
# progressive JPEGs of one DC scan over and at the cap
python3 - "$work/corpus" <<'PY' || fuzz_seed_failed "could not write the hostile seeds"
import struct, sys, zlib
out = sys.argv[1]
def chunk(kind, data, length=None):
    return (struct.pack(">I", len(data) if length is None else length) + kind + data +
            struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff))
sig = b"\x89PNG\r\n\x1a\n"
ihdr = lambda w, h, depth, colour: chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, colour, 0, 0, 0))
seeds = {}
for kind in (b"tEXt", b"zTXt", b"iCCP", b"IDAT"):
    seeds["bomb-" + kind.decode()] = sig + ihdr(1, 1, 8, 2) + struct.pack(">I", 0x7fffffff) + kind + b"Comment\0\0" + b"x" * 91
for side in (1024, 512):
    rows = b"\0" * ((1 + side // 8) * side)
    seeds["zlib-bomb-%d" % side] = sig + ihdr(side, side, 1, 0) + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b"")
seeds["trailing"] = (sig + ihdr(1, 1, 8, 2) + chunk(b"IDAT", zlib.compress(b"\0" * (16 << 20), 9)) +
                     chunk(b"IEND", b""))
def progressive(side):
    seg = lambda m, body: b"\xff" + bytes([m]) + struct.pack(">H", len(body) + 2) + body
    return (b"\xff\xd8" + seg(0xdb, b"\0" + b"\1" * 64) +
            seg(0xc2, struct.pack(">BHHB", 8, side, side, 3) + b"".join(bytes([i + 1, 0x11, 0]) for i in range(3))) +
            seg(0xc4, b"\0" + bytes([1] + [0] * 15) + b"\0") +
            seg(0xda, bytes([3, 1, 0, 2, 0, 3, 0, 0, 0, 0])) + b"\0" * (3 * (side // 8) ** 2 // 8) + b"\xff\xd9")
for side in (1024, 512):
    seeds["progressive-%d" % side] = progressive(side)
for name, data in seeds.items():
    with open("%s/%s" % (out, name), "wb") as f:
        f.write(data)
PY
cat > "$work/dict" <<'DICT'
"IHDR"
"IDAT"
"IEND"
"PLTE"
"tRNS"
"gAMA"
"iCCP"
"sBIT"
"tEXt"
"zTXt"
"iTXt"
"eXIf"
"sPLT"
"\x7f\xff\xff\xff"
"acTL"
"fcTL"
"\x89PNG\x0d\x0a\x1a\x0a"
"\xff\xd8\xff"
"\xff\xc0"
"\xff\xc2"
"\xff\xc4"
"\xff\xda"
"\xff\xdb"
"\xff\xdd"
"\xff\xd9"
"\xff\xee"
"\xff\xe1"
"\xff\xfe"
"Adobe"
"RIFF"
"WEBP"
"VP8 "
"VP8L"
"VP8X"
"ALPH"
"ANIM"
"ANMF"
DICT
fuzz_run 15 -max_len=160000 -rss_limit_mb=512 -malloc_limit_mb=64
