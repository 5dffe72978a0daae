/*
 * Every entry point with bad input: a typed status, nothing lost, no hook called, no crash.
 *
 * Order matters (the provider is process-wide): keepalloc_get_table before anything is
 * published, then the names, then the registry's bound, then re-entry, then the backend
 * (which conflicts once the owner exists) and the version.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdatomic.h>
#include <string.h>

#include "check.h"

static atomic_int hook_calls;

static int must_not_run(const keepalloc_table* table, void* user_data) {
  (void)table;
  (void)user_data;
  atomic_fetch_add(&hook_calls, 1);
  return 0;
}

static int ok_hook(const keepalloc_table* table, void* user_data) {
  (void)table;
  (void)user_data;
  return 0;
}

static keepalloc_status nested = KEEPALLOC_OK;
static keepalloc_status nested_default = KEEPALLOC_OK;
static keepalloc_status nested_other = KEEPALLOC_INIT_FAILED;
static const keepalloc_table* nested_out;

static int reentering_hook(const keepalloc_table* table, void* user_data) {
  (void)table;
  (void)user_data;
  nested_out = NULL;
  nested = keepalloc_acquire_library("outer", must_not_run, NULL, &nested_out);
  const keepalloc_table* other = NULL;
  nested_other = keepalloc_acquire_library("inner", ok_hook, NULL, &other);
  return 0;
}

static int reentering_default_hook(const keepalloc_table* table, void* user_data) {
  (void)table;
  (void)user_data;
  const keepalloc_table* out = NULL;
  nested_default = keepalloc_acquire(must_not_run, NULL, &out);
  return 0;
}

static void* my_alloc(void* c, size_t n) { (void)c; (void)n; return NULL; }
static void* my_realloc(void* c, void* p, size_t n) { (void)c; (void)p; (void)n; return NULL; }
static void my_free(void* c, void* p) { (void)c; (void)p; }
static void* my_aligned(void* c, size_t a, size_t n) { (void)c; (void)a; (void)n; return NULL; }

int main(void) {
  const keepalloc_table* const sentinel = (const keepalloc_table*)&hook_calls;
  const keepalloc_table* out = sentinel;
  keepalloc_hook_result result = KEEPALLOC_HOOK_SUCCEEDED;

  STEP("keepalloc_get_table before publication");
  CHECK(keepalloc_get_table(NULL) == KEEPALLOC_INVALID_ARGUMENT);
  CHECK(keepalloc_get_table(&out) == KEEPALLOC_NOT_PUBLISHED);
  CHECK(out == sentinel);

  STEP("NULL library and NULL out_table");
  CHECK(keepalloc_acquire_library(NULL, must_not_run, NULL, &out) == KEEPALLOC_INVALID_ARGUMENT);
  CHECK(keepalloc_acquire_library("lib", must_not_run, NULL, NULL) == KEEPALLOC_INVALID_ARGUMENT);
  CHECK(keepalloc_acquire_ex(NULL, must_not_run, NULL, &out, &result) ==
        KEEPALLOC_INVALID_ARGUMENT);
  CHECK(result == KEEPALLOC_HOOK_NOT_CALLED);
  CHECK(keepalloc_acquire_ex("lib", must_not_run, NULL, NULL, NULL) == KEEPALLOC_INVALID_ARGUMENT);
  CHECK(keepalloc_library_initialized(NULL) == 0);

  STEP("empty, over-long and non-UTF-8 names");
  char too_long[KEEPALLOC_MAX_LIBRARY_NAME + 2];
  memset(too_long, 'x', sizeof too_long - 1);
  too_long[sizeof too_long - 1] = 0;
  char longest[KEEPALLOC_MAX_LIBRARY_NAME + 1];
  memset(longest, 'x', sizeof longest - 1);
  longest[sizeof longest - 1] = 0;
  CHECK(keepalloc_acquire_library("", must_not_run, NULL, &out) == KEEPALLOC_INVALID_LIBRARY_NAME);
  CHECK(keepalloc_acquire_library(too_long, must_not_run, NULL, &out) == KEEPALLOC_INVALID_LIBRARY_NAME);
  CHECK(keepalloc_acquire_library("\xff\xfe", must_not_run, NULL, &out) ==
        KEEPALLOC_INVALID_LIBRARY_NAME);
  result = KEEPALLOC_HOOK_SUCCEEDED;
  CHECK(keepalloc_acquire_ex("", must_not_run, NULL, &out, &result) ==
        KEEPALLOC_INVALID_LIBRARY_NAME);
  CHECK(result == KEEPALLOC_HOOK_NOT_CALLED);
  CHECK(out == sentinel);
  CHECK(atomic_load(&hook_calls) == 0);
  /* Bad input built nothing. */
  keepalloc_stats s;
  keepalloc_get_stats(&s);
  CHECK_EQ_U64(s.owners_constructed, 0);

  STEP("a name of exactly the limit works");
  CHECK(keepalloc_acquire_library(longest, ok_hook, NULL, &out) == KEEPALLOC_OK);
  CHECK(out != sentinel && out != NULL);
  const keepalloc_table* table = out;
  CHECK(keepalloc_get_table(&out) == KEEPALLOC_OK && out == table);

  STEP("re-entry");
  CHECK(keepalloc_acquire_library("outer", reentering_hook, NULL, &out) == KEEPALLOC_OK);
  CHECK(nested == KEEPALLOC_REENTERED);
  CHECK(nested_out == NULL);
  CHECK(nested_other == KEEPALLOC_OK);
  CHECK(keepalloc_library_initialized("outer") == 1 && keepalloc_library_initialized("inner") == 1);
  CHECK(keepalloc_acquire(reentering_default_hook, NULL, &out) == KEEPALLOC_OK);
  CHECK(nested_default == KEEPALLOC_REENTERED);
  CHECK(atomic_load(&hook_calls) == 0);

  STEP("the registry's bound");
  /* "default", `longest`, "outer" and "inner" hold four slots; fill the rest. */
  char name[16];
  for (int i = 0; i < KEEPALLOC_MAX_LIBRARIES - 4; i++) {
    snprintf(name, sizeof name, "lib%d", i);
    CHECK(keepalloc_acquire_library(name, ok_hook, NULL, &out) == KEEPALLOC_OK);
  }
  out = sentinel;
  CHECK(keepalloc_acquire_library("one-too-many", must_not_run, NULL, &out) ==
        KEEPALLOC_TOO_MANY_LIBRARIES);
  CHECK(out == sentinel);
  /* Nothing was lost: registered libraries and the default one still work. */
  CHECK(keepalloc_acquire_library("lib0", must_not_run, NULL, &out) == KEEPALLOC_OK && out == table);
  CHECK(keepalloc_acquire(must_not_run, NULL, &out) == KEEPALLOC_OK && out == table);
  /* A NULL hook publishes only: it needs no slot. */
  CHECK(keepalloc_acquire_library("one-too-many", NULL, NULL, &out) == KEEPALLOC_OK);
  CHECK(atomic_load(&hook_calls) == 0);

  STEP("keepalloc_set_backend");
  keepalloc_backend backend = {NULL, my_alloc, my_realloc, my_free, my_aligned, my_free};
  CHECK(keepalloc_set_backend(NULL) == KEEPALLOC_INVALID_ARGUMENT);
  backend.reallocate = NULL;
  CHECK(keepalloc_set_backend(&backend) == KEEPALLOC_INVALID_ARGUMENT);
  backend.reallocate = my_realloc;
  /* The owner exists already: too late for any backend. */
  CHECK(keepalloc_set_backend(&backend) == KEEPALLOC_BACKEND_CONFLICT);
  CHECK(strcmp(keepalloc_backend_name(), "plugged") != 0);

  STEP("version and stats");
  CHECK(keepalloc_version() == KEEPALLOC_VERSION);
  keepalloc_get_stats(NULL);
  keepalloc_get_stats(&s);
  CHECK_EQ_U64(s.owners_constructed, 1);

  printf("ok: bad_input (every entry point refused bad input with a status)\n");
  return 0;
}
