/*
 * keepalloc_status_string names every status and refuses none, and keepalloc_get_stats_ex
 * lets keepalloc_stats grow: an older caller's smaller struct is filled only as far as it
 * reaches (the bytes after it untouched), a newer caller's larger one has the fields this
 * library lacks zeroed, and NULL writes nothing.
 *
 * The negative control stats-ex-overrun in controls/broken_contract.c (writes the whole
 * struct whatever size says, the classic ABI bug of a growing struct) must fail here at the
 * canary check.
 */
#include <string.h>

#include "check.h"

/* An older header's keepalloc_stats: its first three fields. */
typedef struct {
  uint64_t owners_constructed, init_attempts, init_successes;
} stats_v0;

static int hook(const keepalloc_table* table, void* user_data) {
  (void)user_data;
  void* p = table->allocate(table->context, 100);
  return p == NULL; /* kept live: the counters have something to say */
}

int main(void) {
  STEP("keepalloc_status_string for every status");
  const char* seen[12];
  for (int i = 0; i < 12; i++) {
    const char* text = keepalloc_status_string((keepalloc_status)i);
    CHECK(text != NULL && text[0] != '\0');
    CHECK(strstr(text, "unknown") == NULL);
    for (int j = 0; j < i; j++) CHECK(strcmp(seen[j], text) != 0);
    seen[i] = text;
  }
  CHECK(strcmp(keepalloc_status_string(KEEPALLOC_OK), "ok") == 0);
  CHECK(strncmp(keepalloc_status_string(KEEPALLOC_INIT_FAILED), "init failed", 11) == 0);
  STEP("keepalloc_status_string out of range");
  CHECK(strcmp(keepalloc_status_string((keepalloc_status)12), "unknown keepalloc_status") == 0);
  CHECK(strcmp(keepalloc_status_string((keepalloc_status)-1), "unknown keepalloc_status") == 0);

  const keepalloc_table* table = NULL;
  CHECK(keepalloc_acquire(hook, NULL, &table) == KEEPALLOC_OK);
  keepalloc_stats plain = stats_now();
  CHECK(plain.owners_constructed == 1 && plain.allocations >= 1);

  STEP("keepalloc_get_stats_ex with this header's size");
  keepalloc_stats full;
  memset(&full, 0xAB, sizeof full);
  CHECK_EQ_U64(keepalloc_get_stats_ex(&full, sizeof full), sizeof full);
  CHECK(memcmp(&full, &plain, sizeof full) == 0);

  STEP("keepalloc_get_stats_ex with an older, smaller struct");
  struct {
    stats_v0 stats;
    unsigned char canary[32];
  } older;
  memset(&older, 0xAB, sizeof older);
  CHECK_EQ_U64(keepalloc_get_stats_ex((keepalloc_stats*)(void*)&older, sizeof older.stats),
               sizeof older.stats);
  CHECK_EQ_U64(older.stats.owners_constructed, plain.owners_constructed);
  CHECK_EQ_U64(older.stats.init_attempts, plain.init_attempts);
  for (size_t i = 0; i < sizeof older.canary; i++) CHECK(older.canary[i] == 0xAB);

  STEP("keepalloc_get_stats_ex with a newer, larger struct");
  struct {
    keepalloc_stats stats;
    uint64_t later_fields[4];
  } newer;
  memset(&newer, 0xAB, sizeof newer);
  CHECK_EQ_U64(keepalloc_get_stats_ex((keepalloc_stats*)(void*)&newer, sizeof newer),
               sizeof(keepalloc_stats));
  CHECK(memcmp(&newer.stats, &plain, sizeof plain) == 0);
  for (int i = 0; i < 4; i++) CHECK_EQ_U64(newer.later_fields[i], 0);

  STEP("keepalloc_get_stats_ex(NULL, ...)");
  CHECK_EQ_U64(keepalloc_get_stats_ex(NULL, sizeof full), 0);

  puts("ok: status_and_stats");
  return 0;
}
