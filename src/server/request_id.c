#include "server/request_id.h"

#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static bool usable(const char *given) {
    size_t n = given ? strlen(given) : 0;
    if (n == 0 || n > 64) return false;
    for (size_t i = 0; i < n; i++)
        if (given[i] <= 0x20 || given[i] >= 0x7f) return false;
    return true;
}

void lm_request_id_make(bool anthropic, const char *given, uint64_t counter, char out[LM_REQUEST_ID_SIZE]) {
    if (!anthropic && usable(given)) {
        snprintf(out, LM_REQUEST_ID_SIZE, "%s", given);
        return;
    }
    uint64_t bits[2];
    if (getrandom(bits, sizeof bits, GRND_NONBLOCK) != (ssize_t)sizeof bits) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        bits[0] = mix((uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec);
        bits[1] = mix(bits[0] ^ (counter * 0x9e3779b97f4a7c15ull));
    }
    if (!anthropic) {
        snprintf(out, LM_REQUEST_ID_SIZE, "req_%016llx%016llx", (unsigned long long)bits[0],
                 (unsigned long long)bits[1]);
        return;
    }
    static const char digits[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    memcpy(out, "req_", 4);
    for (int i = 0; i < 24; i++) /* each letter from a fresh 64-bit draw of the two seeds */
        out[4 + i] = digits[mix((bits[i & 1] += 0x9e3779b97f4a7c15ull)) % 62];
    out[28] = 0;
}
