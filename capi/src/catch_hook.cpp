// keepalloc's hook trampoline: calls a C or C++ init hook and turns a C++ exception escaping
// it into a status, because Rust cannot catch a foreign exception (catch_unwind aborts the
// process with "Rust cannot catch foreign exceptions" on rustc 1.95, which the C test
// `hook_throws` shows through its negative control).
//
// A Rust panic escaping a hook (a Rust function passed as keepalloc_init_fn) is foreign to
// C++: std::current_exception() is empty for it, and it is rethrown untouched so that the
// caller's catch_unwind catches it (a C++ catch (...) that swallowed a Rust panic would abort).
#include <exception>

extern "C" {
typedef int (*keepalloc_internal_hook)(const void* table, void* user_data);

int keepalloc_internal_call_hook(keepalloc_internal_hook hook, const void* table,
                                 void* user_data, int* threw) {
  try {
    return hook(table, user_data);
  } catch (...) {
    if (!std::current_exception()) {
      throw;  // not a C++ exception (a Rust panic): rethrow to Rust's catch_unwind
    }
    *threw = 1;
    return -1;
  }
}
}
