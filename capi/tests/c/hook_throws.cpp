// A C++ hook that throws: the exception is caught inside keepalloc (it never reaches C or
// Rust frames that cannot handle it), destroyed, and reported as KEEPALLOC_INIT_FAILED /
// KEEPALLOC_HOOK_THREW; the library stays uninitialized and a retry with the same owner
// succeeds. Exceptions of any type (std::exception, an int, a class with a destructor) are
// handled alike.
#include "keepalloc.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "check.h"

static std::atomic<int> destroyed{0};
static std::atomic<void*> first_context{nullptr};

struct Tracked {
  ~Tracked() { destroyed.fetch_add(1); }
};

extern "C" {
static int throws_runtime_error(const keepalloc_table* table, void*) {
  first_context.store(table->context);
  throw std::runtime_error("init failed");
}
static int throws_int(const keepalloc_table*, void*) { throw 42; }
static int throws_tracked(const keepalloc_table*, void*) { throw Tracked{}; }
static int succeeds(const keepalloc_table* table, void* user_data) {
  *static_cast<void**>(user_data) = table->context;
  return 0;
}
}

int main() {
  const keepalloc_table* out = nullptr;
  keepalloc_hook_result result = KEEPALLOC_HOOK_NOT_CALLED;

  STEP("hook throws std::runtime_error");
  CHECK(keepalloc_acquire_ex("cxx", throws_runtime_error, nullptr, &out, &result) ==
        KEEPALLOC_INIT_FAILED);
  CHECK(result == KEEPALLOC_HOOK_THREW);
  CHECK(out == nullptr);
  CHECK(keepalloc_library_initialized("cxx") == 0);

  STEP("hook throws an int");
  CHECK(keepalloc_acquire_ex("cxx", throws_int, nullptr, &out, &result) == KEEPALLOC_INIT_FAILED);
  CHECK(result == KEEPALLOC_HOOK_THREW);

  STEP("hook throws an object with a destructor");
  int before = destroyed.load();
  CHECK(keepalloc_acquire_library("cxx", throws_tracked, nullptr, &out) == KEEPALLOC_INIT_FAILED);
  CHECK(destroyed.load() > before);  // the exception object was destroyed, not leaked

  STEP("the default library's hook throws through keepalloc_acquire");
  CHECK(keepalloc_acquire(throws_int, nullptr, &out) == KEEPALLOC_INIT_FAILED);

  STEP("retry succeeds with the same owner");
  void* context = nullptr;
  CHECK(keepalloc_acquire_ex("cxx", succeeds, &context, &out, &result) == KEEPALLOC_OK);
  CHECK(result == KEEPALLOC_HOOK_SUCCEEDED);
  CHECK(out != nullptr && context == first_context.load() && out->context == context);
  keepalloc_stats s;
  keepalloc_get_stats(&s);
  CHECK(s.owners_constructed == 1);
  CHECK(s.init_attempts == 1 && s.init_successes == 0);  // the default library: one throw

  STEP("after success a throwing hook is not called");
  CHECK(keepalloc_acquire_ex("cxx", throws_int, nullptr, &out, &result) == KEEPALLOC_OK);
  CHECK(result == KEEPALLOC_HOOK_ALREADY_DONE);

  std::printf("ok: hook_throws (every exception became KEEPALLOC_INIT_FAILED)\n");
  return 0;
}
