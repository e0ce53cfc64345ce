/* A minimal test harness: each tests/test_*.c is one binary whose main() runs
 * its tests with RUN_TEST and ends with `return test_summary("name");`, which
 * prints "name: N passed, N failed" for tests/run.sh to add up. */
#ifndef LOOM_TESTS_HARNESS_H
#define LOOM_TESTS_HARNESS_H

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"

void test_failed(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
bool test_current_failed(void);
void test_run(const char *name, void (*fn)(void));
/* test_run for a test that takes an argument (one fixture of several, say). */
void test_run_with(const char *name, void (*fn)(void *), void *arg);
int test_summary(const char *suite);

/* The fixtures folder: $LOOM_FIXTURES, default tests/fixtures. */
const char *test_fixtures_dir(void);
/* Joins the fixtures folder and a relative path into buf. */
const char *test_fixture_path(char *buf, size_t size, const char *relative);
/* A new folder $TMPDIR/loom-<what>-XXXXXX (mkdtemp) into buf; false,
 * saying why on stderr, when it cannot be made. */
bool test_make_temp_folder(char *buf, size_t size, const char *what);
/* A fresh scratch directory for this test binary (removed by nobody: under /tmp). */
const char *test_scratch_dir(void);

/* How many rounds a randomized or repeated sweep runs: `full` in an
 * optimized build (every tree but build/asan, and the reruns of run.sh),
 * `sanitized` under AddressSanitizer, where a round costs 5-20 times as
 * much and the sweep is there for memory errors and undefined behaviour,
 * which the first rounds' code paths already meet; the full count's
 * statistics are the release tree's to prove.  LOOM_TEST_FULL=1 runs
 * `full` in every build. */
int test_rounds(int full, int sanitized);

#define RUN_TEST(fn) test_run(#fn, fn)

#define CHECK(cond)                                                   \
    do {                                                              \
        if (!(cond)) {                                                \
            test_failed(__FILE__, __LINE__, "check failed: %s", #cond); \
            return;                                                   \
        }                                                             \
    } while (0)

#define CHECK_MSG(cond, ...)                                  \
    do {                                                      \
        if (!(cond)) {                                        \
            test_failed(__FILE__, __LINE__, __VA_ARGS__);     \
            return;                                           \
        }                                                     \
    } while (0)

/* Asserts an lm_status call succeeded, printing the error message if not. */
#define CHECK_OK(call, errp)                                                        \
    do {                                                                            \
        lm_status check_status_ = (call);                                           \
        if (check_status_ != LM_OK) {                                               \
            test_failed(__FILE__, __LINE__, "%s failed: %s", #call, (errp)->message); \
            return;                                                                 \
        }                                                                           \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                                   \
    do {                                                                                        \
        double check_a_ = (a), check_b_ = (b);                                                  \
        if (!(check_a_ - check_b_ <= (tol) && check_b_ - check_a_ <= (tol))) {                  \
            test_failed(__FILE__, __LINE__, "%s = %.9g, %s = %.9g, tolerance %g", #a, check_a_, \
                        #b, check_b_, (double)(tol));                                           \
            return;                                                                             \
        }                                                                                       \
    } while (0)

#endif
