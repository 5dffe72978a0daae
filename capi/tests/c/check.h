/*
 * check.h — the assertion and thread helpers shared by keepalloc's C and C++ tests.
 *
 * Every test is its own program (the provider is process-wide, so each test needs a fresh
 * process). A failed CHECK prints "<file>:<line>: CHECK failed: <condition>" and exits with
 * status 1; a passing test prints "ok: <name>" and returns 0. The negative controls are
 * judged by that text (or by STEP and the signal), so a condition a control is caught by
 * must be unique within its test.
 */
#ifndef KEEPALLOC_TEST_CHECK_H
#define KEEPALLOC_TEST_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "keepalloc.h"

#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);  \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

#define CHECK_EQ_U64(a, b)                                                       \
  do {                                                                           \
    uint64_t check_a_ = (uint64_t)(a), check_b_ = (uint64_t)(b);                 \
    if (check_a_ != check_b_) {                                                  \
      fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%" PRIu64 " != %" PRIu64 ")\n", \
              __FILE__, __LINE__, #a, #b, check_a_, check_b_);                   \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

/* Names the step the test is about to run, on stderr (unbuffered, so the line is out before
 * anything in the step can crash). A test killed by a signal died in its LAST step: the
 * runner checks that a negative control that must crash does so in the step its bug is in. */
#define STEP(name) fprintf(stderr, "step: %s\n", name)

/* Checks pthread calls (they return an error number instead of setting errno). */
#define CHECK_PTHREAD(call)                                                      \
  do {                                                                           \
    int check_rc_ = (call);                                                      \
    if (check_rc_ != 0) {                                                        \
      fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__, #call, check_rc_); \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

static inline keepalloc_stats stats_now(void) {
  keepalloc_stats s = {0, 0, 0, 0, 0, 0, 0};
  keepalloc_get_stats(&s);
  return s;
}

static inline void print_stats(const char* label, const keepalloc_stats* s) {
  printf("%s: owners_constructed=%" PRIu64 " init_attempts=%" PRIu64 " init_successes=%" PRIu64
         " allocations=%" PRIu64 " deallocations=%" PRIu64 " live_bytes=%" PRIu64
         " peak_bytes=%" PRIu64 "\n",
         label, s->owners_constructed, s->init_attempts, s->init_successes, s->allocations,
         s->deallocations, s->live_bytes, s->peak_bytes);
}

#endif /* KEEPALLOC_TEST_CHECK_H */
