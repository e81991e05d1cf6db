// A job queue over long-lived std::threads: a caller posts its job, works on it itself, and waits
// until its parts are done and no worker still holds it.
#include "runtime/cpu_workers.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>

namespace kiln::runtime {

namespace {

// How long an idle worker, or a caller waiting for its helpers, watches for the next job or the
// last part before it sleeps: a layer's kernels come microseconds apart, and waking a sleeping
// thread takes longer than many of them run.
constexpr auto k_spin = std::chrono::microseconds(50);

// Calls `ready` until it is true or k_spin has passed; returns its last answer.
template <class Ready>
bool spin_until(Ready ready) {
  auto until = std::chrono::steady_clock::now() + k_spin;
  for (unsigned i = 1;; ++i) {
    if (ready()) return true;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
    if (i % 64 == 0 && std::chrono::steady_clock::now() >= until) return ready();
  }
}

struct Job {
  const std::function<void(size_t)>* part = nullptr;
  size_t parts = 0;
  int helpers_wanted = 0;
  std::atomic<size_t> next{0};
  std::atomic<size_t> finished{0};  // parts run, for a caller watching before it sleeps
  // Guarded by the pool's mutex.
  size_t done = 0;
  int helpers = 0;  // workers on it now
};

class Workers {
 public:
  void run(size_t parts, int threads, const std::function<void(size_t)>& part);
  int size() {
    std::lock_guard lock(m_mutex);
    return m_threads;
  }

 private:
  void grow(int wanted);
  void work();
  // Runs parts of `job` until none are left; returns how many it ran.
  static size_t take_parts(Job& job) {
    size_t ran = 0;
    for (size_t i = job.next++; i < job.parts; i = job.next++) {
      (*job.part)(i);
      ++ran;
      job.finished.fetch_add(1, std::memory_order_release);
    }
    return ran;
  }

  std::mutex m_mutex;
  std::condition_variable m_posted;    // a job wants helpers
  std::condition_variable m_finished;  // a part finished or a helper left a job
  std::deque<Job*> m_jobs;             // jobs that may still take helpers
  std::atomic<uint64_t> m_posts{0};    // jobs posted so far, for workers watching before they sleep
  int m_threads = 0;  // started, detached, each in work() for good
  bool m_cannot_grow = false;  // the system refused a thread once
};

void Workers::grow(int wanted) {
  // Called with m_mutex held.
  while (m_threads < wanted && !m_cannot_grow) {
    try {
      std::thread([this] { work(); }).detach();  // the pool lives as long as the process
    } catch (const std::system_error&) {
      // No more threads to be had: use those there are, and do not ask again on every run.
      m_cannot_grow = true;
      return;
    }
    ++m_threads;
  }
}

void Workers::work() {
  std::unique_lock lock(m_mutex);
  for (;;) {
    if (m_jobs.empty()) {  // watch for the next job a while, then sleep until one comes
      uint64_t seen = m_posts.load(std::memory_order_relaxed);
      lock.unlock();
      spin_until([&] { return m_posts.load(std::memory_order_acquire) != seen; });
      lock.lock();
    }
    m_posted.wait(lock, [&] { return !m_jobs.empty(); });
    Job* job = m_jobs.front();
    if (job->next >= job->parts) {  // every part taken: nothing to help with
      m_jobs.pop_front();
      continue;
    }
    if (++job->helpers >= job->helpers_wanted) m_jobs.pop_front();
    lock.unlock();
    size_t ran = take_parts(*job);
    lock.lock();
    job->done += ran;
    --job->helpers;
    m_finished.notify_all();
  }
}

void Workers::run(size_t parts, int threads, const std::function<void(size_t)>& part) {
  int helpers =
      static_cast<int>(std::min<size_t>(parts, static_cast<size_t>(std::max(threads, 1)))) - 1;
  if (helpers <= 0) {  // nothing to share: no lock, no queue
    for (size_t i = 0; i < parts; ++i) part(i);
    return;
  }
  Job job;
  job.part = &part;
  job.parts = parts;
  job.helpers_wanted = helpers;
  {
    std::lock_guard lock(m_mutex);
    grow(helpers);
    if (m_threads > 0) {
      m_jobs.push_back(&job);
      m_posts.fetch_add(1, std::memory_order_release);
      m_posted.notify_all();
    }
  }
  // No worker may hold the job once this returns, whether the parts ran or one threw: off the
  // queue, then wait for the helpers on it.
  auto release = [&](std::unique_lock<std::mutex>& lock) {
    for (auto it = m_jobs.begin(); it != m_jobs.end(); ++it) {
      if (*it == &job) {
        m_jobs.erase(it);
        break;
      }
    }
    m_finished.wait(lock, [&] { return job.helpers == 0; });
  };
  size_t ran = 0;
  try {
    ran = take_parts(job);
  } catch (...) {
    job.next = parts;  // the parts not yet taken never run
    std::unique_lock lock(m_mutex);
    release(lock);
    throw;
  }
  // The helpers' last parts are usually microseconds away: watch for them before sleeping.
  spin_until([&] { return job.finished.load(std::memory_order_acquire) == parts; });
  std::unique_lock lock(m_mutex);
  job.done += ran;
  release(lock);
  m_finished.wait(lock, [&] { return job.done == parts; });
}

Workers& workers() {
  static Workers* pool = new Workers();  // never destroyed: its threads outlive static destruction
  return *pool;
}

}  // namespace

void run_parts(size_t parts, int threads, const std::function<void(size_t)>& part) {
  workers().run(parts, threads, part);
}

int cpu_workers() { return workers().size(); }

}  // namespace kiln::runtime
