// The zyx device's hooks: what PyTorch asks of an accelerator outside any op
// (at::PrivateUse1HooksInterface), built into one library with the device guard by
// device_guard.py and registered before PyTorch's Python backend set-up.
//
// PyTorch's Python hooks object forwards only availability; everything else raised "You should
// register PrivateUse1HooksInterface ...". Once torch_zyx is loaded (torch's device-extension
// autoload) zyx is the current accelerator, so `tensor.pin_memory()` and
// `DataLoader(pin_memory=True)` asked these hooks for a pinned-memory allocator and failed, in
// CPU-only programs too. Here:
// - pinned memory: page-aligned host memory from an allocator that remembers its blocks, so
//   `is_pinned()` is true for it. zyx's runtimes copy from host memory themselves (the CPU
//   runtime reads it in place), so "pinned" buys no transfer path of its own.
// - generators: `torch.Generator(device="zyx")` is a counter-based generator's state, the
//   (seed, next counter) pair of torch_zyx/record/random.py; the random ops read the seed and take
//   counters through its offset (`initial_seed()`, `get_offset()`, `set_offset()`).
// Also the allocator of zyx storages (`torch.UntypedStorage(n, device="zyx")`, which crashed the
// process without one): zyx tensors keep their data in zyx's own pools, so such a storage is
// host memory, what torch.load(map_location="zyx") fills before it rebuilds each tensor on it
// (storage.py copies the bytes into a zyx buffer when a tensor is set to the storage). It is
// the device's c10::DeviceAllocator, which is where torch.accelerator's memory functions
// (memory_allocated, memory_stats, empty_cache, reset_peak_memory_stats, get_memory_info) ask:
// its statistics are those of zyx's pools (torch.zyx.memory_allocated() and friends), read
// through a callback that device_guard.py sets.
// Also the device's choice of scaled_dot_product_attention kernel (ATen's _fused_sdp_choice
// stub, which PyTorch asks per call before it decomposes the op into its math form): the fused
// "overrideable" op (torch_zyx/ops/nn/attention.py, one fused kernel where the device has one)
// for calls that kernel takes, the math form otherwise. Which dtypes a zyx device fuses comes
// from a callback that device_guard.py sets, asked once per device.

#include <ATen/Context.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/Functions.h>
#include <ATen/native/transformers/attention.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/GeneratorImpl.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unistd.h>

namespace {

constexpr c10::DeviceType kZyx = c10::DeviceType::PrivateUse1;
constexpr std::size_t kPage = 4096;
constexpr uint64_t kDefaultSeed = 67280421310721ULL;  // torch_zyx/record/random.py's DEFAULT_SEED

// ------------------------------------------------------------------------------ pinned memory
std::mutex pinned_mutex;
std::map<const char*, std::size_t>& pinned_blocks() {
  static auto* blocks = new std::map<const char*, std::size_t>();  // never freed: used until exit
  return *blocks;
}

void free_pinned(void* data) {
  {
    std::lock_guard<std::mutex> lock(pinned_mutex);
    pinned_blocks().erase(static_cast<const char*>(data));
  }
  std::free(data);
}

// Whether `data` lies in a block of the pinned allocator (a tensor's data may start inside one).
bool in_pinned_block(const void* data) {
  const char* pointer = static_cast<const char*>(data);
  std::lock_guard<std::mutex> lock(pinned_mutex);
  auto& blocks = pinned_blocks();
  auto after = blocks.upper_bound(pointer);
  if (after == blocks.begin()) {
    return false;
  }
  --after;
  return pointer < after->first + std::max<std::size_t>(after->second, 1);
}

struct PinnedAllocator final : public c10::Allocator {
  c10::DataPtr allocate(std::size_t bytes) override {
    void* data = nullptr;
    std::size_t rounded = (std::max<std::size_t>(bytes, 1) + kPage - 1) / kPage * kPage;
    TORCH_CHECK(posix_memalign(&data, kPage, rounded) == 0, "zyx: could not allocate ", bytes,
                " bytes of pinned host memory");
    {
      std::lock_guard<std::mutex> lock(pinned_mutex);
      pinned_blocks()[static_cast<const char*>(data)] = bytes;
    }
    return {data, data, &free_pinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

// ------------------------------------------------------------------------------ zyx storages
void free_host(void* data) { std::free(data); }

// What the pools answer (device_guard.py): the request, then 4 values it fills for kStats
// (bytes allocated, their peak, bytes reserved, their peak); 0 when it succeeded, else the
// error's text is in the buffer.
enum PoolRequest { kStats = 0, kEmptyCache = 1, kResetPeak = 2, kResetAccumulated = 3 };
using PoolCallback = int (*)(int request, int64_t* values, char* message, int capacity);
PoolCallback pool_callback = nullptr;

void ask_pools(PoolRequest request, int64_t* values) {
  TORCH_CHECK(pool_callback != nullptr, "zyx: the device's memory statistics are not available");
  char message[1024] = {0};
  TORCH_CHECK(pool_callback(request, values, message, sizeof(message)) == 0, std::string(message));
}

void set_stat(c10::CachingAllocator::StatArray& stats, int64_t current, int64_t peak) {
  auto& all = stats[static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
  all.current = current;
  all.peak = peak;
}

struct StorageAllocator final : public c10::DeviceAllocator {
  c10::DataPtr allocate(std::size_t bytes) override {
    void* data = nullptr;
    if (bytes) {
      TORCH_CHECK(posix_memalign(&data, 64, bytes) == 0, "zyx: could not allocate a storage of ",
                  bytes, " bytes");
    }
    return {data, data, &free_host, c10::Device(kZyx, 0)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_host; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override { ask_pools(kEmptyCache, nullptr); }
  void recordStream(const c10::DataPtr&, c10::Stream) override {}  // one stream, ordered by events
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex) override {
    int64_t values[4] = {0, 0, 0, 0};
    ask_pools(kStats, values);
    c10::CachingDeviceAllocator::DeviceStats stats;
    set_stat(stats.allocated_bytes, values[0], values[1]);
    set_stat(stats.active_bytes, values[0], values[1]);
    set_stat(stats.requested_bytes, values[0], values[1]);
    set_stat(stats.reserved_bytes, values[2], values[3]);
    return stats;
  }
  void resetAccumulatedStats(c10::DeviceIndex) override { ask_pools(kResetAccumulated, nullptr); }
  void resetPeakStats(c10::DeviceIndex) override { ask_pools(kResetPeak, nullptr); }
  // zyx's memory is the host's: its free (available) and total physical memory.
  std::pair<std::size_t, std::size_t> getMemoryInfo(c10::DeviceIndex) override {
    auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    return {page * static_cast<std::size_t>(sysconf(_SC_AVPHYS_PAGES)),
            page * static_cast<std::size_t>(sysconf(_SC_PHYS_PAGES))};
  }
};

// ---------------------------------------------------------------------------------- generator
struct ZyxGenerator final : public c10::GeneratorImpl {
  explicit ZyxGenerator(c10::DeviceIndex index)
      : c10::GeneratorImpl(c10::Device(kZyx, index), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)) {}

  // A new seed starts the counter again, as torch_zyx.record.random.manual_seed does.
  void set_current_seed(uint64_t seed) override {
    seed_ = seed;
    offset_ = 0;
  }
  void set_offset(uint64_t offset) override { offset_ = offset; }
  uint64_t get_offset() const override { return offset_; }
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override {
    auto now = std::chrono::high_resolution_clock::now().time_since_epoch().count();
    set_current_seed(static_cast<uint64_t>(now));
    return seed_;
  }
  // The state is 16 bytes, (seed, offset) as little-endian uint64: get_rng_state's format.
  void set_state(const c10::TensorImpl& state) override {
    TORCH_CHECK(state.dtype() == caffe2::TypeMeta::Make<uint8_t>() && state.numel() == 16 &&
                    state.is_contiguous() && state.device_type() == c10::DeviceType::CPU,
                "RNG state must be a torch.ByteTensor of 16 bytes");
    const auto* bytes = static_cast<const char*>(state.data());
    std::memcpy(&seed_, bytes, 8);
    std::memcpy(&offset_, bytes + 8, 8);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    at::Tensor state = at::empty({16}, at::TensorOptions().dtype(at::kByte));
    auto* bytes = static_cast<char*>(state.data_ptr());
    std::memcpy(bytes, &seed_, 8);
    std::memcpy(bytes + 8, &offset_, 8);
    return state.getIntrusivePtr();
  }
  static c10::DeviceType device_type() { return kZyx; }

 private:
  ZyxGenerator* clone_impl() const override {
    auto* copy = new ZyxGenerator(device().index());
    copy->seed_ = seed_;
    copy->offset_ = offset_;
    return copy;
  }
  uint64_t seed_ = kDefaultSeed;
  uint64_t offset_ = 0;
};

// ------------------------------------------------------------------------------------- hooks
struct ZyxHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override {
    return at::make_generator<ZyxGenerator>(device_index < 0 ? 0 : device_index);
  }
  bool isPinnedPtr(const void* data) const override { return in_pinned_block(data); }
  at::Allocator* getPinnedMemoryAllocator() const override {
    static PinnedAllocator allocator;
    return &allocator;
  }
};

}  // namespace

// 1 when these hooks are now PrivateUse1's, 0 when other hooks were registered first. They are
// never freed: PyTorch keeps using them until exit.
extern "C" int zyx_register_hooks() {
  if (at::isPrivateUse1HooksRegistered()) {
    return 0;
  }
  at::RegisterPrivateUse1HooksInterface(new ZyxHooks());
  static StorageAllocator storage_allocator;
  c10::SetAllocator(kZyx, &storage_allocator);
  return 1;
}

// The callback answering for zyx's pools (device_guard.py keeps the ctypes object alive).
extern "C" void zyx_set_pool_callback(PoolCallback callback) { pool_callback = callback; }

// ------------------------------------------------------------------------ attention choice
namespace {
// sdp::SDPBackend's values (torch/nn/attention: MATH 0, OVERRIDEABLE 4).
constexpr int64_t kMathSDP = 0;
constexpr int64_t kOverrideableSDP = 4;
constexpr int kMaxDevices = 64;
// Per device: the dtypes its fused attention takes (bit 0 half, bit 1 bfloat16), -1 not asked.
using AttentionCallback = int (*)(int device);
AttentionCallback attention_callback = nullptr;
std::atomic<int> attention_dtypes[kMaxDevices];
std::once_flag attention_init;

int fused_dtypes(int device) {
  std::call_once(attention_init, [] {
    for (auto& mask : attention_dtypes) mask.store(-1);
  });
  if (device < 0 || device >= kMaxDevices || attention_callback == nullptr) return 0;
  int mask = attention_dtypes[device].load();
  if (mask < 0) {
    mask = attention_callback(device);
    attention_dtypes[device].store(mask);
  }
  return mask;
}

bool head_fits(int64_t size) { return size >= 16 && size <= 128 && size % 16 == 0; }

// What ops/nn/attention.py's fused op and codegen/lower_attention.py's kernel take: equal batch
// and head dims (no grouped-query broadcast), no mask, no dropout, half or bfloat16 on a device
// that fuses it, head sizes multiples of 16 up to 128, and the user allowing this backend
// (torch.nn.attention.sdpa_kernel).
int64_t zyx_fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                             const std::optional<at::Tensor>& attn_mask, double dropout_p, bool /*is_causal*/,
                             std::optional<double> /*scale*/, bool /*enable_gqa*/) {
  if (!at::globalContext().userEnabledOverrideableSDP()) return kMathSDP;
  if ((attn_mask.has_value() && attn_mask->defined()) || dropout_p > 0.0) return kMathSDP;
  if (query.dim() < 3 || key.dim() != query.dim() || value.dim() != query.dim()) return kMathSDP;
  const int64_t d = query.dim();
  for (int64_t i = 0; i < d - 2; ++i) {
    if (key.size(i) != query.size(i) || value.size(i) != query.size(i)) return kMathSDP;
  }
  if (key.size(d - 2) != value.size(d - 2) || key.size(d - 1) != query.size(d - 1)) return kMathSDP;
  if (query.size(d - 2) == 0 || key.size(d - 2) == 0) return kMathSDP;
  if (!head_fits(query.size(d - 1)) || !head_fits(value.size(d - 1))) return kMathSDP;
  const auto dtype = query.scalar_type();
  if (key.scalar_type() != dtype || value.scalar_type() != dtype) return kMathSDP;
  const int bit = dtype == at::kHalf ? 1 : dtype == at::kBFloat16 ? 2 : 0;
  if (bit == 0 || !(fused_dtypes(query.device().index()) & bit)) return kMathSDP;
  return kOverrideableSDP;
}
}  // namespace

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &zyx_fused_sdp_choice)
}  // namespace at::native

extern "C" void zyx_set_attention_callback(AttentionCallback callback) { attention_callback = callback; }
