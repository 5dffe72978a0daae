// keepalloc from C++17: an RAII wrapper over keepalloc_acquire, used by two "sessions"
// created at the same moment on two threads.
//
// keepalloc::Session acquires the process-wide allocator in its constructor (throwing
// keepalloc::Error if that fails), owns what the session allocated (buffers from the table,
// and with XNNPACK a fully-connected operator) and releases exactly that in its destructor.
// It never releases the process-wide owner: that lives until the process exits, because the
// library kept a pointer to it.
//
// Built with -DKEEPALLOC_EXAMPLE_WITH_XNNPACK (and -lXNNPACK -lpthreadpool) the init hook is
// xnn_initialize and each session runs an XNNPACK operator; without it a stand-in library
// copies the table the same way xnn_initialize does. `cargo xtask c-test` builds both when
// XNNPACK is installed, with -std=c++17 -Wall -Wextra -Werror -pedantic.
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "keepalloc.h"

#ifdef KEEPALLOC_EXAMPLE_WITH_XNNPACK
#include <xnnpack.h>
#endif

namespace keepalloc {

// keepalloc_acquire failed; the status says why. Safe to retry (a new Session).
class Error : public std::runtime_error {
 public:
  explicit Error(keepalloc_status status)
      : std::runtime_error("keepalloc_acquire failed with status " + std::to_string(status)),
        status_(status) {}
  keepalloc_status status() const noexcept { return status_; }

 private:
  keepalloc_status status_;
};

// Frees a block through the table it came from.
struct TableDeleter {
  const keepalloc_table* table;
  void operator()(void* p) const noexcept { table->deallocate(table->context, p); }
};

template <class T>
using TableBuffer = std::unique_ptr<T[], TableDeleter>;

// Calls a C++ callable as a keepalloc_init_fn; exceptions become a failed init (nothing may
// unwind through keepalloc_acquire).
template <class F>
int init_trampoline(const keepalloc_table* table, void* user_data) noexcept {
  try {
    return (*static_cast<F*>(user_data))(table) ? 0 : 1;
  } catch (...) {
    return 1;
  }
}

// One session's view of the process-wide allocator.
class Session {
 public:
  // Acquires the process-wide allocator, running `library_init(table)` if this is the call
  // that initializes it. Throws Error on failure.
  template <class F>
  explicit Session(F& library_init) {
    keepalloc_status status = keepalloc_acquire(&init_trampoline<F>, &library_init, &table_);
    if (status != KEEPALLOC_OK) throw Error(status);
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  ~Session() = default;  // frees the session's own blocks; the owner stays (by design)

  const keepalloc_table* table() const noexcept { return table_; }

  // An array of n T from the process-wide allocator, freed when the TableBuffer goes.
  template <class T>
  TableBuffer<T> allocate(std::size_t n) {
    void* p = table_->aligned_allocate(table_->context, alignof(T) < 16 ? 16 : alignof(T),
                                       n * sizeof(T));
    if (p == nullptr) throw std::bad_alloc();
    return TableBuffer<T>(static_cast<T*>(p), TableDeleter{table_});
  }

 private:
  const keepalloc_table* table_ = nullptr;
};

keepalloc_stats stats() {
  keepalloc_stats s{};
  keepalloc_get_stats(&s);
  return s;
}

}  // namespace keepalloc

#define CHECK(cond)                                                                     \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);     \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

namespace {

std::atomic<int> init_calls{0};

#ifdef KEEPALLOC_EXAMPLE_WITH_XNNPACK
const char* const library_name = "XNNPACK";

bool library_init(const keepalloc_table* table) {
  init_calls.fetch_add(1);
  return xnn_initialize(reinterpret_cast<const xnn_allocator*>(table)) == xnn_status_success;
}

struct OperatorDeleter {
  void operator()(xnn_operator_t op) const noexcept { xnn_delete_operator(op); }
};

// One inference through an XNNPACK fully-connected operator owned by the session.
void session_work(keepalloc::Session& session, std::size_t id) {
  const std::size_t in = 16 + id, out = 8 + id;
  auto x = session.allocate<float>(in + XNN_EXTRA_BYTES / sizeof(float));
  auto w = session.allocate<float>(in * out);
  auto y = session.allocate<float>(out);
  for (std::size_t i = 0; i < in; i++) x[i] = 1.0f;
  for (std::size_t i = 0; i < in * out; i++) w[i] = static_cast<float>(i % in) / 16.0f;
  xnn_operator_t raw = nullptr;
  CHECK(xnn_create_fully_connected_nc_f32(in, out, in, out, w.get(), nullptr, -INFINITY,
                                          INFINITY, 0, &raw) == xnn_status_success);
  std::unique_ptr<xnn_operator, OperatorDeleter> op(raw);
  CHECK(xnn_setup_fully_connected_nc_f32(op.get(), 1, x.get(), y.get(), nullptr) ==
        xnn_status_success);
  CHECK(xnn_run_operator(op.get(), nullptr) == xnn_status_success);
  const float expect = static_cast<float>(in * (in - 1) / 2) / 16.0f;
  for (std::size_t o = 0; o < out; o++) CHECK(std::fabs(y[o] - expect) <= 1e-4f * expect);
}
#else
const char* const library_name = "a stand-in library";

// Copies the table once and keeps it, as xnn_initialize does.
std::optional<keepalloc_table> library_table;

bool library_init(const keepalloc_table* table) {
  init_calls.fetch_add(1);
  if (!library_table) library_table = *table;
  return true;
}

void session_work(keepalloc::Session& session, std::size_t id) {
  auto buffer = session.allocate<double>(1000 + id);
  for (std::size_t i = 0; i < 1000 + id; i++) buffer[i] = static_cast<double>(i);
  // The library allocates through its own copy of the table.
  const keepalloc_table& t = *library_table;
  void* p = t.allocate(t.context, 256);
  CHECK(p != nullptr);
  t.deallocate(t.context, p);
  CHECK(buffer[999] == 999.0);
}
#endif

// Releases both threads at once.
class Gate {
 public:
  explicit Gate(int n) : waiting_(n) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (--waiting_ == 0) {
      cv_.notify_all();
    } else {
      cv_.wait(lock, [this] { return waiting_ == 0; });
    }
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int waiting_;
};

}  // namespace

int main() {
  const keepalloc_stats base = keepalloc::stats();
  Gate gate(2);
  const keepalloc_table* seen[2] = {nullptr, nullptr};
  std::vector<std::thread> threads;
  for (std::size_t id = 0; id < 2; id++) {
    threads.emplace_back([&, id] {
      gate.arrive_and_wait();
      try {
        auto init = library_init;
        keepalloc::Session session(init);  // RAII: acquired here...
        seen[id] = session.table();
        session_work(session, id);
      } catch (const std::exception& e) {  // ...and the session's blocks freed on any exit
        std::fprintf(stderr, "session %zu: %s\n", id, e.what());
        std::exit(1);
      }
    });
  }
  for (auto& t : threads) t.join();

  CHECK(seen[0] != nullptr && seen[0] == seen[1]);
  CHECK(init_calls.load() == 1);
  const keepalloc_stats s = keepalloc::stats();
  CHECK(s.owners_constructed == 1 && s.init_attempts == 1 && s.init_successes == 1);
  CHECK(s.allocations > base.allocations);
  CHECK(s.live_bytes == base.live_bytes);  // both sessions gave back everything they took
  std::printf("ok: raii_sessions with %s: two sessions on two threads, one table %p, "
              "%llu allocations through it, live bytes back to %llu\n",
              library_name, static_cast<const void*>(seen[0]),
              static_cast<unsigned long long>(s.allocations),
              static_cast<unsigned long long>(s.live_bytes));
  return 0;
}
