/*
 * together.h — threads released together by a barrier, so that they all call in at once:
 * the race harness of keepalloc's C tests. Define _POSIX_C_SOURCE 200809L before including
 * it (pthread barriers under -std=c11).
 */
#ifndef KEEPALLOC_TEST_TOGETHER_H
#define KEEPALLOC_TEST_TOGETHER_H

#include <pthread.h>
#include <stdlib.h>

#include "check.h"

struct together_thread {
  pthread_barrier_t* gate;
  void (*body)(size_t);
  size_t index;
};

static void* together_main(void* arg) {
  struct together_thread* t = arg;
  int rc = pthread_barrier_wait(t->gate);
  CHECK(rc == 0 || rc == PTHREAD_BARRIER_SERIAL_THREAD);
  t->body(t->index);
  return NULL;
}

/* Runs body(0) .. body(count - 1), each on a thread of its own, all released by one barrier,
 * and joins them. */
static void run_together(size_t count, void (*body)(size_t)) {
  pthread_barrier_t gate;
  pthread_t* threads = calloc(count, sizeof *threads);
  struct together_thread* args = calloc(count, sizeof *args);
  CHECK(threads != NULL && args != NULL);
  CHECK_PTHREAD(pthread_barrier_init(&gate, NULL, (unsigned)count));
  for (size_t i = 0; i < count; i++) {
    args[i] = (struct together_thread){&gate, body, i};
    CHECK_PTHREAD(pthread_create(&threads[i], NULL, together_main, &args[i]));
  }
  for (size_t i = 0; i < count; i++) {
    CHECK_PTHREAD(pthread_join(threads[i], NULL));
  }
  CHECK_PTHREAD(pthread_barrier_destroy(&gate));
  free(args);
  free(threads);
}

#endif /* KEEPALLOC_TEST_TOGETHER_H */
