// keepalloc.h from C++17: the header compiles cleanly (-std=c++17 -Wall -Wextra -Werror
// -pedantic), its types have C layout, and the API is callable with a captureless lambda as
// the init hook.
#include "keepalloc.h"

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "check.h"

static_assert(std::is_standard_layout_v<keepalloc_table>);
static_assert(std::is_trivially_copyable_v<keepalloc_table>);
static_assert(sizeof(keepalloc_table) == 6 * sizeof(void*));
static_assert(offsetof(keepalloc_table, context) == 0);
static_assert(offsetof(keepalloc_table, aligned_deallocate) == 5 * sizeof(void*));
static_assert(std::is_standard_layout_v<keepalloc_stats>);
static_assert(sizeof(keepalloc_stats) == 7 * sizeof(std::uint64_t));
static_assert(static_cast<int>(KEEPALLOC_OK) == 0 && static_cast<int>(KEEPALLOC_INIT_FAILED) == 1 &&
              static_cast<int>(KEEPALLOC_OUT_OF_MEMORY) == 2 &&
              static_cast<int>(KEEPALLOC_INVALID_ARGUMENT) == 3);
static_assert(std::is_same_v<decltype(&keepalloc_acquire),
                             keepalloc_status (*)(keepalloc_init_fn, void*, const keepalloc_table**)>);
static_assert(std::is_same_v<decltype(&keepalloc_acquire_library),
                             keepalloc_status (*)(const char*, keepalloc_init_fn, void*,
                                                  const keepalloc_table**)>);
static_assert(std::is_same_v<keepalloc_backend, keepalloc_table>);
static_assert(static_cast<int>(KEEPALLOC_FORKED_DURING_INIT) == 9 && static_cast<int>(KEEPALLOC_REGISTERED_ELSEWHERE) == 11 &&
              static_cast<int>(KEEPALLOC_HOOK_THREW) == 4);
static_assert(KEEPALLOC_VERSION == ((KEEPALLOC_VERSION_MAJOR << 16) | (KEEPALLOC_VERSION_MINOR << 8) |
                                    KEEPALLOC_VERSION_PATCH));

int main() {
  std::atomic<int> calls{0};
  keepalloc_init_fn hook = [](const keepalloc_table* table, void* user_data) noexcept -> int {
    static_cast<std::atomic<int>*>(user_data)->fetch_add(1);
    return table != nullptr && table->allocate != nullptr ? 0 : 1;
  };
  const keepalloc_table* table = nullptr;
  CHECK(keepalloc_acquire(hook, &calls, &table) == KEEPALLOC_OK);
  CHECK(table != nullptr);
  CHECK(calls.load() == 1);
  void* p = table->allocate(table->context, 32);
  CHECK(p != nullptr);
  table->deallocate(table->context, p);
  keepalloc_stats s{};
  keepalloc_get_stats(&s);
  CHECK(s.owners_constructed == 1 && s.init_successes == 1 && s.live_bytes == 0);
  std::printf("ok: header_cxx17 (backend %s)\n", keepalloc_backend_name());
  return 0;
}
