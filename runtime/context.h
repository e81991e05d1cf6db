// Which CUDA context a call runs in, and making it current for the call only.
#pragma once

#include "runtime/driver.h"

namespace kiln::runtime {

// The driver's handle of device ordinal `device`.
Expected<CuDevice> device_handle(const DriverApi& api, int device);

// Device `device`'s primary context, retained once per process and device (never released:
// the driver releases it at exit). Fails with the driver's message.
Expected<CuContext> primary_context(const DriverApi& api, int device);

// The calling thread in relaxed stream-capture mode for one scope (the previous mode restored
// after): kiln's own allocations and module loads then never break a capture another thread has
// in progress, as cuThreadExchangeStreamCaptureMode's documentation recommends.
class RelaxedCapture {
public:
  explicit RelaxedCapture(const DriverApi& api) : m_api(api) {
    m_swapped = m_api.thread_exchange_capture_mode(&m_mode) == 0;
  }
  ~RelaxedCapture() {
    if (m_swapped) m_api.thread_exchange_capture_mode(&m_mode);
  }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

private:
  const DriverApi& m_api;
  int m_mode = k_capture_mode_relaxed;
  bool m_swapped = false;
};

// A context made current for one scope: pushed when it is not already current, popped on
// destruction, so the caller's current context is what it was.
class ScopedContext {
public:
  // The context work for device `device` on `stream` runs in: a created stream's own context
  // (which must be on `device`); for the legacy or per-thread default stream (nullptr, 0x1, 0x2),
  // the current context when it is on `device`, else the device's primary context.
  static Expected<ScopedContext> for_device(const DriverApi& api, int device, CuStream stream);
  // `context` itself, e.g. to tear down what was loaded in it. Fails when it is gone.
  static Expected<ScopedContext> enter(const DriverApi& api, CuContext context);

  ScopedContext(ScopedContext&& other) noexcept;
  ScopedContext& operator=(ScopedContext&&) = delete;
  ScopedContext(const ScopedContext&) = delete;
  ~ScopedContext();

  CuContext context() const { return m_context; }
  // cuCtxGetId: unique for the process's lifetime, unlike the handle, which a new context can
  // reuse after this one is destroyed.
  unsigned long long id() const { return m_id; }

private:
  ScopedContext(const DriverApi& api, CuContext context) : m_api(&api), m_context(context) {}
  // enter() when the caller already asked the driver which context is current.
  static Expected<ScopedContext> enter(const DriverApi& api, CuContext context,
                                       CuContext current);

  const DriverApi* m_api = nullptr;
  CuContext m_context = nullptr;
  unsigned long long m_id = 0;
  bool m_pushed = false;
};

}  // namespace kiln::runtime
