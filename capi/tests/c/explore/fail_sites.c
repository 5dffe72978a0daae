/*
 * KEEPALLOC_FAIL from C: a runtime's two allocation sites through the published table.
 * Prints which calls got NULL ("weights: NULL") and frees what it got, so the test can
 * fail one site by its hash and see the other untouched. Run by c_tests.rs
 * (keepalloc_fail_*) with KEEPALLOC_FAIL set; prints "acquire: <status>" when refused.
 */
#include <stdio.h>

#include "keepalloc.h"

__attribute__((noinline)) void* make_weights(const keepalloc_table* t) {
  return t->aligned_allocate(t->context, 64, 4096);
}

__attribute__((noinline)) void* make_workspace(const keepalloc_table* t) {
  return t->aligned_allocate(t->context, 64, 1024);
}

int main(void) {
  const keepalloc_table* table = NULL;
  keepalloc_status status = keepalloc_acquire(NULL, NULL, &table);
  if (status != KEEPALLOC_OK) {
    printf("acquire: %d\n", (int)status);
    return 3;
  }
  for (int i = 0; i < 3; i++) {
    void* w = make_weights(table);
    void* s = make_workspace(table);
    printf("weights: %s, workspace: %s\n", w ? "ok" : "NULL", s ? "ok" : "NULL");
    if (w) table->aligned_deallocate(table->context, w);
    if (s) table->aligned_deallocate(table->context, s);
  }
  /* One block left live on purpose: the exit report lists it by site. */
  void* kept = make_weights(table);
  printf("kept: %s\n", kept ? "ok" : "NULL");
  return 0;
}
