/* A small, fast pseudo-random generator for sampling: xoshiro256** seeded
 * through splitmix64.  Every sequence owns one, so a seeded request draws the
 * same numbers whatever else shares its batch.  Not for cryptography. */
#ifndef LOOM_ENGINE_RNG_H
#define LOOM_ENGINE_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t s[4];
} lm_rng;

/* Any 64-bit seed, 0 included, gives a valid (never all-zero) state. */
void lm_rng_seed(lm_rng *rng, uint64_t seed);
uint64_t lm_rng_next(lm_rng *rng);
/* Uniform in [0, 1) with 53 random bits. */
double lm_rng_uniform(lm_rng *rng);
/* The seed of stream `stream` (e.g. choice i) of a request seeded with
 * `seed`: for one seed, different streams give different seeds (the map is a
 * bijection of the stream), and nearby seeds or streams look unrelated. */
uint64_t lm_rng_derive(uint64_t seed, uint64_t stream);

#endif
