// Baseline for bench_tree: absl::btree_map<uint64_t, uint64_t>, same keys,
// same order, single thread. usage: pmoss_bench_absl N
#include <absl/container/btree_map.h>

#include <cstdio>
#include <cstdlib>

extern "C" {
#include "bench_keys.h"
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        std::fprintf(stderr, "usage: pmoss_bench_absl N\n");
        return 2;
    }
    uint64_t n = std::strtoull(argv[1], nullptr, 0);
    absl::btree_map<uint64_t, uint64_t> m;
    double t0 = bench_now();
    for (uint64_t i = 0; i < n; i++)
        m[bench_key(i)] = i;
    double t1 = bench_now();
    uint64_t found = 0;
    for (uint64_t i = 0; i < n; i++)
        found += m.find(bench_probe(i, n)) != m.end();
    double t2 = bench_now();
    std::printf("{\"impl\": \"absl::btree_map\", \"n\": %llu, \"insert_s\": %.6f, "
                "\"lookup_s\": %.6f, \"found\": %llu}\n",
                (unsigned long long)n, t1 - t0, t2 - t1, (unsigned long long)found);
    return found == n ? 0 : 1;
}
