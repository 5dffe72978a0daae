/*
 * keepalloc_acquire(init, user_data, NULL) returns KEEPALLOC_INVALID_ARGUMENT and does
 * nothing else: the hook is not called, no owner is built, no counter moves. Likewise
 * keepalloc_get_stats(NULL) is a no-op. A later valid call then works normally.
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

  for (int i = 0; i < 3; i++) {
    CHECK(keepalloc_acquire(counting_hook, NULL, NULL) == KEEPALLOC_INVALID_ARGUMENT);
    CHECK(keepalloc_acquire(NULL, NULL, NULL) == KEEPALLOC_INVALID_ARGUMENT);
  }
  keepalloc_get_stats(NULL);

  keepalloc_stats after = stats_now();
  CHECK(hook_calls == 0);
  CHECK(memcmp(&before, &after, sizeof before) == 0);
  CHECK_EQ_U64(after.owners_constructed, 0);
  CHECK_EQ_U64(after.init_attempts, 0);
  CHECK_EQ_U64(after.init_successes, 0);
  CHECK_EQ_U64(after.allocations, 0);

  const keepalloc_table* table = NULL;
  CHECK(keepalloc_acquire(counting_hook, NULL, &table) == KEEPALLOC_OK);
  CHECK(table != NULL);
  CHECK(hook_calls == 1);
  CHECK_EQ_U64(stats_now().owners_constructed, 1);

  /* Still invalid after publication (the fast path checks too). */
  CHECK(keepalloc_acquire(counting_hook, NULL, NULL) == KEEPALLOC_INVALID_ARGUMENT);
  CHECK(hook_calls == 1);

  printf("ok: invalid_argument\n");
  return 0;
}
