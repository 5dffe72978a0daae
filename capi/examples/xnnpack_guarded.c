/*
 * The real XNNPACK on a guarded table: keepalloc's provider over Scribble in guard-page mode
 * (run with KEEPALLOC_SCRIBBLE=guard:1/1,stacks:both; cargo xtask c-test sets it).
 *
 *   xnnpack_guarded shapes             XNNPACK is initialized through keepalloc_acquire (the
 *                                      hook calls xnn_initialize(table)); fully-connected
 *                                      operators on odd shapes are created, set up, run and
 *                                      deleted, with their weights, bias, input and output
 *                                      allocated through the same table at their EXACT sizes:
 *                                      every block is guarded, so XNNPACK's reads of up to
 *                                      XNN_EXTRA_BYTES past the end of an input land in the
 *                                      block's 16-byte slack and must never report. The
 *                                      caller's weights and bias are freed (their pages become
 *                                      PROT_NONE) right after create: XNNPACK must only use
 *                                      its packed copy. Each shape runs without and with a
 *                                      2-thread pthreadpool; results are checked against a
 *                                      scalar reference. Exit 0 and "ok: ...".
 *   xnnpack_guarded use-after-delete   creates and runs one operator, deletes it with
 *                                      xnn_delete_operator, then sets it up and runs it again.
 *                                      In guard mode the operator's freed pages are PROT_NONE:
 *                                      the first read faults, and Scribble reports a
 *                                      guard-use-after-free (exit 19) whose "freed by" stack
 *                                      names xnn_delete_operator. Without KEEPALLOC_SCRIBBLE
 *                                      (the negative control, plain system backend) nothing
 *                                      reports it: the program may crash, or XNNPACK silently
 *                                      reads the freed operator, and it exits 3 ("NOT
 *                                      reported").
 *
 * Both modes print "xnnpack_guarded <mode>: backend <name>, scribble <0|1>" first (flushed,
 * so it is there even when the process dies afterwards). A failed CHECK exits 1.
 *
 * Build: cc -std=c11 -I capi/include xnnpack_guarded.c libkeepalloc.a -lXNNPACK
 *        -lpthreadpool -lpthread -ldl -lm
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthreadpool.h>
#include <xnnpack.h>

#include "check.h"
#include "keepalloc.h"

/* The runtime's library init: hand the table to XNNPACK (keepalloc_table has the layout of
 * struct xnn_allocator; xnnpack_layout.c proves it). */
static int init_xnnpack(const keepalloc_table* table, void* user_data) {
  (void)user_data;
  return xnn_initialize((const struct xnn_allocator*)table) == xnn_status_success ? 0 : 1;
}

static const keepalloc_table* table;

/* Exactly `n` floats from the table: no XNN_EXTRA_BYTES added, the guard's slack covers them. */
static float* table_floats(size_t n) {
  float* p = table->allocate(table->context, n * sizeof(float));
  CHECK(p != NULL);
  return p;
}

static void table_free(void* p) { table->deallocate(table->context, p); }

/* Deterministic test data. */
static float value(size_t i, unsigned seed) {
  return (float)((int)((i * 2654435761u + seed * 40503u) % 17u) - 8) / 8.0f;
}

/* One fully-connected operator: create, free the caller's weights, set up, run, check, delete. */
static void fully_connected(size_t in, size_t out, size_t batch, unsigned seed,
                            pthreadpool_t pool) {
  float* x = table_floats(batch * in);
  float* w = table_floats(out * in);
  float* b = table_floats(out);
  float* y = table_floats(batch * out);
  float* expect = malloc(batch * out * sizeof(float));
  CHECK(expect != NULL);
  const float lo = -4.0f, hi = 4.0f;
  for (size_t i = 0; i < batch * in; i++) x[i] = value(i, seed);
  for (size_t i = 0; i < out * in; i++) w[i] = value(i, seed + 1);
  for (size_t i = 0; i < out; i++) b[i] = value(i, seed + 2);
  for (size_t n = 0; n < batch; n++) {
    for (size_t o = 0; o < out; o++) {
      double acc = b[o];
      for (size_t k = 0; k < in; k++) acc += (double)x[n * in + k] * (double)w[o * in + k];
      expect[n * out + o] = (float)fmin(fmax(acc, lo), hi);
    }
  }

  xnn_operator_t op = NULL;
  CHECK(xnn_create_fully_connected_nc_f32(in, out, in, out, w, b, lo, hi, 0, &op) ==
        xnn_status_success);
  CHECK(op != NULL);
  /* XNNPACK packed the weights into its own memory: the caller's copy goes (PROT_NONE). */
  table_free(w);
  table_free(b);
  for (size_t i = 0; i < batch * out; i++) y[i] = NAN;

  CHECK(xnn_setup_fully_connected_nc_f32(op, batch, x, y, pool) == xnn_status_success);
  CHECK(xnn_run_operator(op, pool) == xnn_status_success);
  for (size_t i = 0; i < batch * out; i++) {
    if (!(fabsf(y[i] - expect[i]) <= 1e-4f * (1.0f + fabsf(expect[i])))) {
      fprintf(stderr, "%zux%zu batch %zu: y[%zu] = %g, expected %g\n", in, out, batch, i,
              (double)y[i], (double)expect[i]);
      CHECK(!"XNNPACK's result matches the reference");
    }
  }
  CHECK(xnn_delete_operator(op) == xnn_status_success);
  table_free(x);
  table_free(y);
  free(expect);
}

/* Odd shapes: input channels that are no multiple of any SIMD width, so the kernels' k
 * remainder reads (XNN_OOB_READS) run past the end of the last input row. */
static const size_t SHAPES[][3] = {
    /* input channels, output channels, batch */
    {1, 1, 1},  {3, 5, 7},   {7, 1, 3},   {17, 13, 3}, {37, 19, 5},
    {71, 33, 9}, {129, 65, 2}, {5, 255, 4}, {255, 3, 11},
};
#define NSHAPES (sizeof SHAPES / sizeof SHAPES[0])

static int shapes(void) {
  keepalloc_stats before = stats_now();
  pthreadpool_t pool = pthreadpool_create(2);
  CHECK(pool != NULL);
  for (int pass = 0; pass < 2; pass++) {
    for (size_t s = 0; s < NSHAPES; s++) {
      fully_connected(SHAPES[s][0], SHAPES[s][1], SHAPES[s][2], (unsigned)s,
                      pass == 0 ? NULL : pool);
    }
  }
  pthreadpool_destroy(pool);
  keepalloc_stats after = stats_now();
  CHECK_EQ_U64(after.live_bytes, before.live_bytes);
  printf("ok: xnnpack_guarded shapes (%zu shapes, without and with a 2-thread pthreadpool; "
         "%llu blocks through the guarded table, exact-size inputs, no report)\n",
         NSHAPES, (unsigned long long)(after.allocations - before.allocations));
  return 0;
}

static int use_after_delete(void) {
  const size_t in = 37, out = 19, batch = 5;
  float* x = table_floats(batch * in);
  float* w = table_floats(out * in);
  float* b = table_floats(out);
  float* y = table_floats(batch * out);
  for (size_t i = 0; i < batch * in; i++) x[i] = value(i, 1);
  for (size_t i = 0; i < out * in; i++) w[i] = value(i, 2);
  for (size_t i = 0; i < out; i++) b[i] = value(i, 3);

  xnn_operator_t op = NULL;
  STEP("create and run");
  CHECK(xnn_create_fully_connected_nc_f32(in, out, in, out, w, b, -4.0f, 4.0f, 0, &op) ==
        xnn_status_success);
  CHECK(xnn_setup_fully_connected_nc_f32(op, batch, x, y, NULL) == xnn_status_success);
  CHECK(xnn_run_operator(op, NULL) == xnn_status_success);
  STEP("delete");
  CHECK(xnn_delete_operator(op) == xnn_status_success);

  /* The bug: the operator is used after xnn_delete_operator freed it. */
  STEP("use after delete");
  enum xnn_status setup = xnn_setup_fully_connected_nc_f32(op, batch, x, y, NULL);
  enum xnn_status run = xnn_status_invalid_state;
  if (setup == xnn_status_success) run = xnn_run_operator(op, NULL);
  fprintf(stderr,
          "use after delete NOT reported: xnn_setup_fully_connected_nc_f32 on the deleted "
          "operator returned %d, xnn_run_operator %d%s\n",
          (int)setup, (int)run, setup == xnn_status_success ? "" : " (not called)");
  return 3;
}

int main(int argc, char** argv) {
  if (argc != 2 || (strcmp(argv[1], "shapes") != 0 && strcmp(argv[1], "use-after-delete") != 0)) {
    fprintf(stderr, "usage: %s shapes|use-after-delete\n", argv[0]);
    return 2;
  }
  STEP("acquire");
  CHECK(keepalloc_acquire(init_xnnpack, NULL, &table) == KEEPALLOC_OK);
  CHECK(table != NULL);
  const int scribble = keepalloc_scribble_enabled();
  printf("xnnpack_guarded %s: backend %s, scribble %d\n", argv[1], keepalloc_backend_name(),
         scribble);
  fflush(stdout);
  if (strcmp(argv[1], "shapes") == 0) {
    CHECK(scribble == 1);
    return shapes();
  }
  return use_after_delete();
}
