#include "harness.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Test-binary bookkeeping; a test binary runs one test at a time. */
static struct {
    int passed, failed;
    bool current_failed;
    const char *current;
    char scratch[256];
} state;

void test_failed(const char *file, int line, const char *fmt, ...) {
    state.current_failed = true;
    fprintf(stderr, "  FAIL %s (%s:%d): ", state.current ? state.current : "?", file, line);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

bool test_current_failed(void) { return state.current_failed; }

typedef struct {
    void (*fn)(void *);
    void *arg;
} call_with;

static void run_one(const char *name, void (*fn)(void), const call_with *with) {
    /* LOOM_TEST_ONLY=part: only the tests whose name contains it (a
     * sanitizer run over one op, say); the others are not counted. */
    const char *only = getenv("LOOM_TEST_ONLY");
    if (only && *only && !strstr(name, only)) return;
    state.current = name;
    state.current_failed = false;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (with)
        with->fn(with->arg);
    else
        fn();
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    if (state.current_failed) {
        state.failed++;
        fprintf(stderr, "  failed %s (%.0f ms)\n", name, ms);
    } else {
        state.passed++;
        if (getenv("LOOM_TEST_VERBOSE")) fprintf(stderr, "  ok %s (%.0f ms)\n", name, ms);
    }
    state.current = NULL;
}

void test_run(const char *name, void (*fn)(void)) { run_one(name, fn, NULL); }

void test_run_with(const char *name, void (*fn)(void *), void *arg) {
    call_with with = {fn, arg};
    run_one(name, NULL, &with);
}

int test_summary(const char *suite) {
    printf("%s: %d passed, %d failed\n", suite, state.passed, state.failed);
    fflush(stdout);
    return state.failed ? 1 : 0;
}

const char *test_fixtures_dir(void) {
    const char *dir = getenv("LOOM_FIXTURES");
    return dir && *dir ? dir : "tests/fixtures";
}

const char *test_fixture_path(char *buf, size_t size, const char *relative) {
    snprintf(buf, size, "%s/%s", test_fixtures_dir(), relative);
    return buf;
}

const char *test_scratch_dir(void) {
    if (!state.scratch[0]) {
        snprintf(state.scratch, sizeof state.scratch, "/tmp/loom-test-XXXXXX");
        if (!mkdtemp(state.scratch)) {
            perror("mkdtemp");
            exit(2);
        }
    }
    return state.scratch;
}

bool test_make_temp_folder(char *buf, size_t size, const char *what) {
    const char *tmp = getenv("TMPDIR");
    snprintf(buf, size, "%s/loom-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", what);
    if (mkdtemp(buf)) return true;
    fprintf(stderr, "mkdtemp %s: %s\n", buf, strerror(errno));
    return false;
}

/* gcc and clang define __SANITIZE_ADDRESS__ under -fsanitize=address
 * (build/asan's SANFLAGS in the Makefile). */
#if defined(__SANITIZE_ADDRESS__)
enum { SANITIZED_BUILD = 1 };
#else
enum { SANITIZED_BUILD = 0 };
#endif

int test_rounds(int full, int sanitized) {
    const char *all = getenv("LOOM_TEST_FULL");
    bool full_here = !SANITIZED_BUILD || (all && strcmp(all, "1") == 0);
    return full_here || sanitized > full ? full : sanitized;
}
