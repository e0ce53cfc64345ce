#include "engine/rng.h"

/* splitmix64's output function: a bijection of 64-bit values that mixes every
 * input bit into every output bit. */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

#define GOLDEN_GAMMA 0x9e3779b97f4a7c15ULL

void lm_rng_seed(lm_rng *rng, uint64_t seed) {
    /* Four consecutive splitmix64 outputs: distinct inputs to a bijection, so
     * at most one word can be zero and the state is never all-zero. */
    for (int i = 0; i < 4; i++) {
        seed += GOLDEN_GAMMA;
        rng->s[i] = mix64(seed);
    }
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t lm_rng_next(lm_rng *rng) {
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double lm_rng_uniform(lm_rng *rng) { return (double)(lm_rng_next(rng) >> 11) * 0x1.0p-53; }

uint64_t lm_rng_derive(uint64_t seed, uint64_t stream) {
    /* For a fixed seed: stream -> mix64(stream + c) is a bijection, adding a
     * constant and mix64 again keep it one, so streams never collide. */
    return mix64(mix64(seed) + mix64(stream + GOLDEN_GAMMA));
}
