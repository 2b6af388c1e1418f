// The zyx device guard: what PyTorch calls to switch device and stream around every op and
// every autograd node on the zyx device (c10::impl::DeviceGuardImplInterface for PrivateUse1).
//
// Built and loaded by device_guard.py, registered before PyTorch's Python backend set-up.
// PyTorch's own Python-backend guard (torch._C._acc.DeviceGuard) asks Python for the device
// type on every call, including from the noexcept destructor of the stream guard that
// autograd's engine holds around each backward node: when a zyx op raised inside a backward,
// that call ran with the Python error still set and the process was terminated. This guard
// never enters Python on those paths. Its behaviour is that guard's: one device index, 0, and
// one default stream; zyx orders its work with its own events (memory/events.py), so recording
// and blocking on streams and events are no-ops. Synchronizing the device, its stream or an
// event (torch.accelerator.synchronize(), torch.Stream/torch.Event.synchronize()) is an
// explicit call from a program: it runs torch.zyx.synchronize() through a callback that
// device_guard.py sets, as waiting for the stream waits for everything recorded before it.
// A timing event (enable_timing=True) is recorded the same way: it notes when everything
// recorded before it had finished, so elapsed_time between two is the device's time between
// them, as CUDA's (the recording thread waits for that work, where CUDA's would not).

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <chrono>
#include <string>

namespace {

// torch.zyx.synchronize() from Python (a ctypes callback, which takes the GIL itself): 0 when
// it succeeded, else it wrote its error into the buffer.
using SyncCallback = int (*)(char* message, int capacity);
SyncCallback sync_callback = nullptr;

void synchronize_all() {
  if (sync_callback == nullptr) {
    return;
  }
  char message[1024] = {0};
  if (sync_callback(message, sizeof(message)) != 0) {
    TORCH_CHECK(false, std::string(message));
  }
}

using c10::Device;
using c10::DeviceIndex;
using c10::DeviceType;
using c10::Stream;

constexpr DeviceType kZyx = DeviceType::PrivateUse1;

Device zyx_device() { return Device(kZyx, 0); }

Stream default_stream() { return Stream(Stream::DEFAULT, zyx_device()); }

// What a timing event holds: when the work recorded before it had finished.
struct TimedEvent {
  std::chrono::steady_clock::time_point done;
};

struct ZyxGuard final : public c10::impl::DeviceGuardImplInterface {
  DeviceType type() const override { return kZyx; }
  Device exchangeDevice(Device) const override { return zyx_device(); }
  Device getDevice() const override { return zyx_device(); }
  void setDevice(Device) const override {}
  void uncheckedSetDevice(Device) const noexcept override {}
  Stream getStream(Device) const noexcept override { return default_stream(); }
  Stream getNewStream(Device, int) const override { return default_stream(); }
  Stream exchangeStream(Stream) const noexcept override { return default_stream(); }
  DeviceIndex deviceCount() const noexcept override { return 1; }
  void record(void** event, const Stream&, const DeviceIndex, const c10::EventFlag flag) const override {
    if (flag != c10::EventFlag::BACKEND_DEFAULT) {
      return;  // no timing: nothing to note
    }
    synchronize_all();
    auto* timed = static_cast<TimedEvent*>(*event);
    if (timed == nullptr) {
      timed = new TimedEvent();
      *event = timed;
    }
    timed->done = std::chrono::steady_clock::now();
  }
  void block(void*, const Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void* event, const DeviceIndex) const noexcept override {
    delete static_cast<TimedEvent*>(event);
  }
  double elapsedTime(void* first, void* second, const DeviceIndex) const override {
    TORCH_CHECK(first != nullptr && second != nullptr,
                "Both events must be recorded before calculating elapsed time.");
    auto start = static_cast<TimedEvent*>(first)->done;
    auto end = static_cast<TimedEvent*>(second)->done;
    return std::chrono::duration<double, std::milli>(end - start).count();
  }
  bool queryStream(const Stream&) const override { return true; }
  void synchronizeStream(const Stream&) const override { synchronize_all(); }
  void synchronizeEvent(void*) const override { synchronize_all(); }
  void synchronizeDevice(const DeviceIndex) const override { synchronize_all(); }
};

}  // namespace

// 1 when this guard is now PrivateUse1's, 0 when another one was registered first. The guard
// is never freed: PyTorch's registry does not own its guards and may use them until exit.
extern "C" int zyx_register_device_guard() {
  if (c10::impl::hasDeviceGuardImpl(kZyx)) {
    return 0;
  }
  c10::impl::registerDeviceGuard(kZyx, new ZyxGuard());
  return 1;
}

// The callback synchronizing the device (device_guard.py keeps the ctypes object alive).
extern "C" void zyx_set_synchronize(SyncCallback callback) { sync_callback = callback; }
