// The fake libcuda: events that record each device's clock, which launches move on by their
// kernels' configured times (fake_cuda.h, "Timing").
#include "fake_state.h"

using namespace kiln::fake_cuda;
using namespace kiln::fake_cuda::detail;

namespace {

Event* find_event(State& s, void* handle) {
  for (auto& e : s.timers)
    if (e.get() == handle) return e.get();
  return nullptr;
}

// Why event `e` cannot be used (0: it can): never created, destroyed, or its context gone.
int event_error(const Event* e) {
  if (!e || !e->alive) return k_invalid_handle;
  if (!e->context->alive || e->generation != e->context->generation) return k_context_is_destroyed;
  return k_success;
}

}  // namespace

extern "C" {

int cuEventCreate(void** event, unsigned flags) {
  FAKE_LOCK;
  Context* c = nullptr;
  if (int r = need_context(c)) return r;
  if (!event || flags > 0xf) return k_invalid_value;
  auto e = std::make_unique<Event>();
  e->context = c;
  e->generation = c->generation;
  *event = e.get();
  s.timers.push_back(std::move(e));
  return k_success;
}

int cuEventRecord(void* event, void* stream) {
  FAKE_LOCK;
  Context* c = nullptr;
  if (int r = need_context(c)) return r;
  Event* e = find_event(s, event);
  if (int r = event_error(e)) return r;
  if (e->context != c) return k_invalid_handle;
  Stream* target = nullptr;
  if (int r = resolve_stream(stream, c, target)) return r;
  e->recorded = true;
  e->at_ms = s.clock_ms[c->device];
  return k_success;
}

int cuEventSynchronize(void* event) {
  FAKE_LOCK;
  Event* e = find_event(s, event);
  if (int r = event_error(e)) return r;
  if (e->context->sticky) return e->context->sticky;
  return k_success;
}

int cuEventElapsedTime_v2(float* ms, void* start, void* end) {
  FAKE_LOCK;
  if (!ms) return k_invalid_value;
  Event* a = find_event(s, start);
  Event* b = find_event(s, end);
  if (int r = event_error(a)) return r;
  if (int r = event_error(b)) return r;
  if (a->context != b->context || !a->recorded || !b->recorded) return k_invalid_handle;
  *ms = static_cast<float>(b->at_ms - a->at_ms);
  return k_success;
}

int cuEventElapsedTime(float* ms, void* start, void* end) {
  return cuEventElapsedTime_v2(ms, start, end);
}

int cuEventDestroy_v2(void* event) {
  FAKE_LOCK;
  Event* e = find_event(s, event);
  if (!e || !e->alive) return k_invalid_handle;
  e->alive = false;
  return k_success;
}

}  // extern "C"
