// A caching CPU allocator for torch, built and loaded by funrl.allocator (see its docstring).
//
// A compiled update step allocates thousands of small buffers per call (every iteration of a
// compiled loop allocates its body's buffers afresh). torch's default CPU allocator takes each from
// posix_memalign, which glibc serves through its slow aligned path (split, free the leftovers,
// consolidate). This allocator keeps freed blocks in per-size free lists and hands them out again.
// Blocks carry a 64-byte header (their size class) in front of the 64-byte-aligned data.

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <pthread.h>

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace {

constexpr size_t kHeaderBytes = 64;  // keeps the data at torch's 64-byte alignment

// Size classes: multiples of 64 bytes up to 64 KiB, then eight classes per power of two
// (at most 12.5% of a block unused).
size_t size_class(size_t nbytes) {
  if (nbytes <= 65536) return (nbytes + 63) & ~size_t(63);
  const size_t step = size_t(1) << (63 - __builtin_clzll(nbytes) - 3);
  return (nbytes + step - 1) & ~(step - 1);
}

struct CachingCPUAllocator final : c10::Allocator {
  std::mutex mutex;
  std::unordered_map<size_t, std::vector<void*>> free_blocks;  // size class -> block bases
  size_t max_block_bytes = 0;
  size_t max_cached_bytes = 0;
  size_t cached_bytes = 0;
  size_t cached_blocks = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
  bool active = false;  // guarded by mutex
  c10::Allocator* previous = nullptr;

  c10::DataPtr allocate(size_t nbytes) override {
    const size_t bytes = size_class(nbytes);
    void* base = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (bytes <= max_block_bytes) {
        auto found = free_blocks.find(bytes);
        if (found != free_blocks.end() && !found->second.empty()) {
          base = found->second.back();
          found->second.pop_back();
          cached_bytes -= bytes;
          --cached_blocks;
          ++hits;
        } else {
          ++misses;
        }
      }
    }
    if (base == nullptr) base = c10::alloc_cpu(bytes + kHeaderBytes);
    *static_cast<size_t*>(base) = bytes;
    void* data = static_cast<char*>(base) + kHeaderBytes;
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }

  static void release(void* data);

  void give_back(void* data) {
    void* base = static_cast<char*>(data) - kHeaderBytes;
    const size_t bytes = *static_cast<size_t*>(base);
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (active && bytes <= max_block_bytes && cached_bytes + bytes <= max_cached_bytes) {
        free_blocks[bytes].push_back(base);
        cached_bytes += bytes;
        ++cached_blocks;
        return;
      }
    }
    c10::free_cpu(base);
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mutex);
    for (auto& entry : free_blocks) {
      for (void* base : entry.second) c10::free_cpu(base);
    }
    free_blocks.clear();
    cached_bytes = 0;
    cached_blocks = 0;
  }

  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

// Never destroyed: tensors allocated here may be freed during process exit, after this library's
// static objects would have been torn down (torch's own statics outlive ours).
CachingCPUAllocator& instance = *new CachingCPUAllocator();

void CachingCPUAllocator::release(void* data) { instance.give_back(data); }

// A fork while another thread holds the lock would leave the child's lock held forever.
void lock_before_fork() { instance.mutex.lock(); }
void unlock_after_fork() { instance.mutex.unlock(); }
std::once_flag fork_handlers_registered;

// c10 keeps the allocator of the highest priority set so far; 255 always wins.
constexpr uint8_t kPriority = 255;

}  // namespace

extern "C" {

void funrl_caching_cpu_allocator_enable(uint64_t max_block_bytes, uint64_t max_cached_bytes) {
  std::call_once(fork_handlers_registered,
                 [] { pthread_atfork(lock_before_fork, unlock_after_fork, unlock_after_fork); });
  std::lock_guard<std::mutex> lock(instance.mutex);
  instance.max_block_bytes = max_block_bytes;
  instance.max_cached_bytes = max_cached_bytes;
  if (!instance.active) {
    instance.previous = c10::GetCPUAllocator();
    c10::SetCPUAllocator(&instance, kPriority);
    instance.active = true;
  }
}

void funrl_caching_cpu_allocator_disable() {
  {
    std::lock_guard<std::mutex> lock(instance.mutex);
    if (instance.active) {
      c10::SetCPUAllocator(instance.previous, kPriority);
      instance.active = false;
    }
  }
  instance.empty_cache();
}

void funrl_caching_cpu_allocator_empty_cache() { instance.empty_cache(); }

// stats: active, hits, misses, cached bytes, cached blocks, max block bytes, max cached bytes.
void funrl_caching_cpu_allocator_stats(uint64_t* out) {
  std::lock_guard<std::mutex> lock(instance.mutex);
  out[0] = instance.active ? 1 : 0;
  out[1] = instance.hits;
  out[2] = instance.misses;
  out[3] = instance.cached_bytes;
  out[4] = instance.cached_blocks;
  out[5] = instance.max_block_bytes;
  out[6] = instance.max_cached_bytes;
}

}  // extern "C"
