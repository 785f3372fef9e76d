// Scratch memory that every element of is written before it is read: a vector whose elements
// are left uninitialised (std::vector<C>(n) would first zero megabytes of col buffer per call).
#ifndef OPFORGE_COMMON_SCRATCH_H_
#define OPFORGE_COMMON_SCRATCH_H_

#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace opforge {

template <typename C>
struct UninitializedAllocator : std::allocator<C> {
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
};
template <typename C>
using Scratch = std::vector<C, UninitializedAllocator<C>>;

}  // namespace opforge

#endif  // OPFORGE_COMMON_SCRATCH_H_
