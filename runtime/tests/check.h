/* Minimal assertion helpers for the runtime's C tests. */
#ifndef PMOSS_TEST_CHECK_H
#define PMOSS_TEST_CHECK_H
#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

#define CHECK_EQ(a, b)                                                                   \
    do {                                                                                 \
        long long a_ = (long long)(a), b_ = (long long)(b);                              \
        if (a_ != b_) {                                                                  \
            fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n", __FILE__, __LINE__, \
                    #a, a_, #b, b_);                                                     \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

/* pm_runtime_create(cfg, rtp) or exit with the runtime's message. */
#define CHECK_CREATE(cfg, rtp)                                                               \
    do {                                                                                     \
        char err_[256] = "";                                                                 \
        int rc_ = pm_runtime_create((cfg), (rtp), err_, sizeof err_);                        \
        if (rc_) {                                                                           \
            fprintf(stderr, "%s:%d: pm_runtime_create: %d %s\n", __FILE__, __LINE__, rc_, err_); \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)
#endif
