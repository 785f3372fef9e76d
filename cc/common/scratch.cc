// The scratch pool (scratch.h).
#include "common/scratch.h"

#include <cstddef>
#include <map>
#include <mutex>
#include <new>
#include <vector>

namespace opforge {

namespace {

constexpr size_t kPoolMinBytes = size_t{1} << 20;
constexpr size_t kPoolMaxBytes = size_t{256} << 20;
constexpr std::align_val_t kAlign{64};

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kPooled = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kPooled = false;
#else
constexpr bool kPooled = true;
#endif
#else
constexpr bool kPooled = true;
#endif

// Pooled blocks are sized by class: the request rounded up to 1/8 of its power of two (at most
// 12.5% more), so that a request and its free agree on the block's size.
size_t SizeClass(size_t bytes) {
  size_t power = kPoolMinBytes;
  while (power * 2 <= bytes) power *= 2;
  const size_t step = power / 8;
  return (bytes + step - 1) / step * step;
}

struct Pool {
  std::mutex mutex;
  std::map<size_t, std::vector<void*>> free;  // by size class
  size_t held = 0;                            // bytes in `free`
};

Pool& ThePool() {
  static Pool* pool = new Pool;  // never destroyed: threads may free into it at exit
  return *pool;
}

}  // namespace

void* ScratchAllocate(size_t bytes) {
  if (!kPooled || bytes < kPoolMinBytes) return ::operator new(bytes == 0 ? 1 : bytes, kAlign);
  const size_t size = SizeClass(bytes);
  Pool& pool = ThePool();
  {
    std::lock_guard<std::mutex> lock(pool.mutex);
    auto it = pool.free.find(size);
    if (it != pool.free.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      pool.held -= size;
      return p;
    }
  }
  return ::operator new(size, kAlign);
}

void ScratchFree(void* p, size_t bytes) {
  if (p == nullptr) return;
  if (!kPooled || bytes < kPoolMinBytes) {
    ::operator delete(p, kAlign);
    return;
  }
  const size_t size = SizeClass(bytes);
  Pool& pool = ThePool();
  {
    std::lock_guard<std::mutex> lock(pool.mutex);
    if (pool.held + size <= kPoolMaxBytes) {
      pool.free[size].push_back(p);
      pool.held += size;
      return;
    }
  }
  ::operator delete(p, kAlign);
}

}  // namespace opforge
