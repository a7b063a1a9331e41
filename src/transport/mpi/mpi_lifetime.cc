// See mpi_lifetime.h.
#include "transport/mpi/mpi_lifetime.h"

#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "common/logging.h"
#include "transport/mpi/mpi_internal.h"

namespace kolo::transport::mpi {
namespace {

struct Lifetime {
  std::mutex mu;
  std::condition_variable cv;
  bool started = false;              // guarded by mu
  bool done_init = false;            // guarded by mu
  int init_rc = MPI_SUCCESS;         // guarded by mu
  int provided = MPI_THREAD_SINGLE;  // guarded by mu
  bool exiting = false;              // guarded by mu
  bool finalize = false;             // guarded by mu: what the thread does once exiting
  std::thread thread;
};

// Never destroyed: the exit handler runs after static destructors may have started.
Lifetime& lifetime() {
  static Lifetime* l = new Lifetime();
  return *l;
}

std::atomic<int> g_live{0};
std::atomic<bool> g_broken{false};
pid_t g_owner_pid = 0;  // the process that started the lifetime thread

void run(Lifetime* l) {
  int provided = MPI_THREAD_SINGLE;
  const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  std::unique_lock<std::mutex> lock(l->mu);
  l->init_rc = rc;
  l->provided = provided;
  l->done_init = true;
  l->cv.notify_all();
  if (rc != MPI_SUCCESS) return;
  l->cv.wait(lock, [l] { return l->exiting; });
  // A program may finalize MPI itself (an `if (!finalized) MPI_Finalize()` at its end):
  // a second MPI_Finalize would abort.
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (l->finalize && !finalized) MPI_Finalize();
}

void at_exit() {
  // A child forked without exec inherits the handler but not the thread.
  if (getpid() != g_owner_pid) return;
  Lifetime& l = lifetime();
  {
    std::lock_guard<std::mutex> lock(l.mu);
    l.exiting = true;
    l.finalize = !g_broken && g_live == 0;
    if (!l.finalize) {
      KOLO_LOG(kDebug, "mpi") << "not finalizing MPI at exit: "
                              << (g_broken ? "a communicator saw a peer failure"
                                           : "a communicator is still in use");
    }
    l.cv.notify_all();
  }
  if (l.thread.joinable()) {
    if (l.finalize) {
      l.thread.join();
    } else {
      l.thread.detach();  // it returns at once; exit does not wait for it
    }
  }
}

}  // namespace

Status ensure_mpi_initialized(int* provided) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    return Status(ErrorCode::kUnsupported,
                  "mpi: the program finalized MPI (MPI_Finalize) and MPI cannot be initialized "
                  "again in this process, so the mpi transport cannot be created");
  }
  Lifetime& l = lifetime();
  std::unique_lock<std::mutex> lock(l.mu);
  if (!l.started) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) {  // the program's own MPI
      lock.unlock();
      MPI_Query_thread(provided);
      return Status::OK();
    }
    l.started = true;
    l.thread = std::thread(run, &l);
    l.cv.wait(lock, [&l] { return l.done_init; });
    if (l.init_rc == MPI_SUCCESS) {
      g_owner_pid = getpid();
      std::atexit(at_exit);
    }
  }
  l.cv.wait(lock, [&l] { return l.done_init; });
  if (l.init_rc != MPI_SUCCESS) {
    return Internal("mpi: MPI_Init_thread failed: " + mpi_error_string(l.init_rc));
  }
  *provided = l.provided;
  return Status::OK();
}

void communicator_created() { ++g_live; }

void communicator_destroyed(bool broken) {
  if (broken) g_broken = true;
  --g_live;
}

}  // namespace kolo::transport::mpi
