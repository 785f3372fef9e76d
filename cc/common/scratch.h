// Scratch memory that every element of is written before it is read: a vector whose elements
// are left uninitialised (std::vector<C>(n) would first zero megabytes of col buffer per call).
#ifndef OPFORGE_COMMON_SCRATCH_H_
#define OPFORGE_COMMON_SCRATCH_H_

#include <cstddef>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace opforge {

// Scratch memory, 64-byte aligned. Blocks of 1 MB and more come from a process-wide pool that
// keeps up to 256 MB of freed blocks for the next call of the same shapes: the convolutions'
// per-call buffers (packed filters, transformed tiles, col buffers: tens of MB) would otherwise
// be fresh pages from the OS on every call, whose zeroing cost a conv2d_transpose training step
// on YOLO's neck shapes a quarter of its time. Under AddressSanitizer every block is a plain
// allocation, so that use-after-free stays visible. Throws std::bad_alloc.
void* ScratchAllocate(size_t bytes);
void ScratchFree(void* p, size_t bytes);

template <typename C>
struct UninitializedAllocator : std::allocator<C> {
  using value_type = C;
  template <typename U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  template <typename U>
  UninitializedAllocator(const UninitializedAllocator<U>&) {}  // NOLINT: allocator conversion
  template <typename U>
  void construct(U* p) {
    ::new (static_cast<void*>(p)) U;  // default-initialisation: no value for arithmetic types
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  C* allocate(size_t n) { return static_cast<C*>(ScratchAllocate(n * sizeof(C))); }
  void deallocate(C* p, size_t n) { ScratchFree(p, n * sizeof(C)); }
};
template <typename C>
using Scratch = std::vector<C, UninitializedAllocator<C>>;

}  // namespace opforge

#endif  // OPFORGE_COMMON_SCRATCH_H_
