/* Key streams shared by the tree and absl benchmarks, so both see the same
 * keys in the same order. */
#ifndef PMOSS_BENCH_KEYS_H
#define PMOSS_BENCH_KEYS_H
#include <stdint.h>
#include <time.h>

static inline uint64_t bench_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
/* i-th inserted key: random 64-bit. */
static inline uint64_t bench_key(uint64_t i) { return bench_mix(i); }
/* i-th lookup: a present key, in random order. */
static inline uint64_t bench_probe(uint64_t i, uint64_t n) { return bench_key(bench_mix(i ^ 0xabcdefull) % n); }

static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
#endif
