/*
 * keepalloc_acquire(init, user_data, NULL) returns KEEPALLOC_INVALID_ARGUMENT and does
 * nothing else: the hook is not called, no owner is built, no counter moves. Likewise
 * keepalloc_get_stats(NULL) is a no-op. A later valid call then works normally, and a NULL
 * out_table is still refused after publication (on the fast path).
 *
 * The negative controls in controls/broken_contract.c that must fail here (CONTROLS in
 * xtask/src/ctools.rs) are told apart by the failed check, or, for a store through
 * NULL, by SIGSEGV in the STEP it belongs to.
 */
#include <string.h>

#include "check.h"

static int hook_calls;

static int counting_hook(const keepalloc_table* table, void* user_data) {
  (void)table;
  (void)user_data;
  hook_calls++;
  return 0;
}

int main(void) {
  keepalloc_stats before = stats_now();
  CHECK_EQ_U64(before.owners_constructed, 0);
  CHECK_EQ_U64(before.init_attempts, 0);

  STEP("keepalloc_acquire(..., NULL) before publication");
  for (int i = 0; i < 3; i++) {
    CHECK(keepalloc_acquire(counting_hook, NULL, NULL) == KEEPALLOC_INVALID_ARGUMENT);
    CHECK(keepalloc_acquire(NULL, NULL, NULL) == KEEPALLOC_INVALID_ARGUMENT);
  }
  STEP("keepalloc_get_stats(NULL)");
  keepalloc_get_stats(NULL);
  STEP("checks that nothing happened");

  keepalloc_stats after = stats_now();
  CHECK(hook_calls == 0);
  CHECK(memcmp(&before, &after, sizeof before) == 0);
  CHECK_EQ_U64(after.owners_constructed, 0);
  CHECK_EQ_U64(after.init_attempts, 0);
  CHECK_EQ_U64(after.init_successes, 0);
  CHECK_EQ_U64(after.allocations, 0);

  STEP("publication");
  const keepalloc_table* table = NULL;
  CHECK(keepalloc_acquire(counting_hook, NULL, &table) == KEEPALLOC_OK);
  CHECK(table != NULL);
  CHECK(hook_calls == 1);
  CHECK_EQ_U64(stats_now().owners_constructed, 1);

  /* Still invalid after publication (the fast path checks too). */
  STEP("keepalloc_acquire(..., NULL) after publication");
  keepalloc_status after_publication = keepalloc_acquire(counting_hook, NULL, NULL);
  STEP("checks after publication");
  CHECK(after_publication == KEEPALLOC_INVALID_ARGUMENT);
  CHECK(hook_calls == 1);

  printf("ok: invalid_argument\n");
  return 0;
}
