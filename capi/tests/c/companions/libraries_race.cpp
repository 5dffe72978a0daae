// The C++ hook of libraries_race.c: records the owner it was given, then throws.
#include <stdexcept>

#include "keepalloc.h"

extern "C" int throwing_hook(const keepalloc_table* table, void* user_data);

extern "C" int throwing_hook(const keepalloc_table* table, void* user_data) {
  (void)user_data;
  if (table == nullptr || table->context == nullptr) return 9;
  throw std::runtime_error("libraries_race: the C++ hook throws");
}
