// The fake libcuda: streams, synchronisation, stream capture and thread capture modes.
#include "fake_state.h"

#include <cstdlib>
#include <cstring>
#include <utility>

using namespace kiln::fake_cuda;
using namespace kiln::fake_cuda::detail;

extern "C" {

int cuStreamCreate(void** stream, unsigned flags) {
  FAKE_LOCK;
  Context* c = nullptr;
  if (int r = need_context(c)) return r;
  if (!stream) return k_invalid_value;
  auto created = std::make_unique<Stream>();
  created->context = c;
  created->generation = c->generation;
  created->blocking = (flags & 1) == 0;
  *stream = created.get();
  s.streams.push_back(std::move(created));
  return k_success;
}

int cuStreamDestroy_v2(void* stream) {
  FAKE_LOCK;
  Context* c = nullptr;
  if (int r = need_context(c)) return r;
  Stream* target = nullptr;
  if (int r = resolve_stream(stream, c, target)) return r;
  if (!target || reinterpret_cast<uintptr_t>(stream) == 2) return k_invalid_handle;
  complete_frees(s, c, target);  // the driver frees them once the stream's work is done
  target->alive = false;
  return k_success;
}

int cuStreamSynchronize(void* stream) {
  FAKE_LOCK;
  Context* c = nullptr;
  if (int r = need_context(c)) return r;
  Stream* target = nullptr;
  if (int r = resolve_stream(stream, c, target)) return r;
  if (target && target->capture_mode >= 0) {
    target->invalidated = true;
    return k_capture_unsupported;
  }
  if (!target) {
    if (int r = check_capture_safe(s)) return r;
  }
  complete_frees(s, c, target);
  s.events.push_back(tag("sync", c));
  return k_success;
}

int cuStreamGetCtx(void* stream, void** context) {
  FAKE_LOCK;
  if (!context) return k_invalid_value;
  auto value = reinterpret_cast<uintptr_t>(stream);
  if (value <= 2) {
    Context* c = current();
    if (!c) return k_invalid_context;
    *context = c;
    return k_success;
  }
  for (auto& candidate : s.streams) {
    if (candidate.get() != stream || candidate->per_thread) continue;
    if (!candidate->alive || !candidate->context->alive ||
        candidate->generation != candidate->context->generation) {
      return k_invalid_handle;
    }
    *context = candidate->context;
    return k_success;
  }
  return k_invalid_handle;
}

int cuStreamBeginCapture_v2(void* stream, int mode) {
  FAKE_LOCK;
  Context* c = nullptr;
  if (int r = need_context(c)) return r;
  Stream* target = nullptr;
  if (int r = resolve_stream(stream, c, target)) return r;
  if (!target || mode < 0 || mode > 2) return k_capture_unsupported;
  if (target->capture_mode >= 0) return k_invalid_value;
  target->capture_mode = mode;
  target->invalidated = false;
  target->capture_thread = std::this_thread::get_id();
  return k_success;
}

int cuStreamEndCapture(void* stream, void** graph) {
  FAKE_LOCK;
  Context* c = nullptr;
  if (int r = need_context(c)) return r;
  Stream* target = nullptr;
  if (int r = resolve_stream(stream, c, target)) return r;
  if (!target || target->capture_mode < 0 || !graph) return k_invalid_value;
  target->capture_mode = -1;
  if (target->invalidated) {
    *graph = nullptr;
    return k_capture_invalidated;
  }
  *graph = target;  // any non-null handle: the fake builds no graph
  return k_success;
}

int cuStreamIsCapturing(void* stream, int* status) {
  FAKE_LOCK;
  Context* c = nullptr;
  if (int r = need_context(c)) return r;
  if (!status) return k_invalid_value;
  Stream* target = nullptr;
  if (int r = resolve_stream(stream, c, target)) return r;
  if (!target) {  // the legacy stream, while a blocking stream of its context is capturing
    for (auto& other : s.streams) {
      if (other->alive && other->context == c && other->blocking && other->capture_mode >= 0 &&
          !other->per_thread) {
        return k_capture_implicit;
      }
    }
  }
  *status = !target || target->capture_mode < 0 ? 0 : target->invalidated ? 2 : 1;
  return k_success;
}

int cuThreadExchangeStreamCaptureMode(int* mode) {
  if (!mode || *mode < 0 || *mode > 2) return k_invalid_value;
  std::swap(*mode, t_capture_mode);
  return k_success;
}

}  // extern "C"
