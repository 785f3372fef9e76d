// The default build of the convolution core's matrix products (gemm.h) and the run-time choice
// of the widest build the CPU supports.
#include "common/gemm.h"

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>

#include "common/parallel.h"
#include "common/scratch.h"

namespace opforge {

namespace gemm {
namespace default_build {
#include "common/gemm.inc"
}  // namespace default_build

template <typename C>
const Gemm<C>* DefaultGemm() {
  return &default_build::kGemm<C>;
}

template <typename C>
const Gemm<C>& BestGemm() {
  static const Gemm<C>* best = Avx512Gemm<C>() != nullptr ? Avx512Gemm<C>()
                               : FmaGemm<C>() != nullptr  ? FmaGemm<C>()
                                                          : DefaultGemm<C>();
  return *best;
}

// Whether no value is inf or NaN: an exponent of all ones, tested on the bits (integer operations,
// which the compiler vectorises).
template <typename C>
bool AllFiniteBits(const C* p, int64_t n) {
  using Bits = std::conditional_t<sizeof(C) == 4, uint32_t, uint64_t>;
  constexpr Bits kExponent =
      static_cast<Bits>(sizeof(C) == 4 ? 0x7f800000ull : 0x7ff0000000000000ull);
  Bits bad = 0;
  for (int64_t j = 0; j < n; ++j) {
    Bits bits;
    std::memcpy(&bits, p + j, sizeof(C));
    bad |= static_cast<Bits>((bits & kExponent) == kExponent);
  }
  return bad == 0;
}

template <typename C>
PackedB<C>::PackedB(const Gemm<C>& gemm, const C* b, int64_t ldb, bool transposed, int64_t k,
                    int64_t n, int64_t m_hint, const Parallel& parallel, int64_t n_block_max)
    : gemm_(&gemm), layout_(gemm.packed_layout(k, n, m_hint)) {
  if (n_block_max > 0 && layout_.n_block > n_block_max) {
    layout_.n_block = n_block_max;
    layout_.n_blocks = (n + n_block_max - 1) / n_block_max;
    layout_.block_stride = (layout_.k_block * layout_.n_block + 15) / 16 * 16;
  }
  const int64_t blocks = layout_.n_blocks * layout_.k_blocks;
  if (blocks == 0 || k == 0 || n == 0) return;
  data_ = static_cast<C*>(ScratchAllocate(Bytes()));
  std::atomic<bool> finite{true};
  parallel.For(blocks, 3.0 * static_cast<double>(layout_.block_stride),
               [&](int64_t begin, int64_t end) {
                 bool ok = true;
                 for (int64_t i = begin; i < end; ++i) {
                   gemm.pack_b_block(b, ldb, transposed, layout_, i, data_);
                   // The block's values, while they are in cache.
                   const int64_t nb = i / layout_.k_blocks, kb = i % layout_.k_blocks;
                   const int64_t rows = std::min(layout_.n_block, n - nb * layout_.n_block);
                   const int64_t depth = std::min(layout_.k_block, k - kb * layout_.k_block);
                   ok = ok && AllFiniteBits(data_ + i * layout_.block_stride, rows * depth);
                 }
                 if (!ok) finite.store(false, std::memory_order_relaxed);
               });
  finite_ = finite.load();
}

template <typename C>
PackedB<C>::~PackedB() {
  if (data_ != nullptr) ScratchFree(data_, Bytes());
}

template <typename C>
size_t PackedB<C>::Bytes() const {
  return sizeof(C) *
         static_cast<size_t>(layout_.n_blocks * layout_.k_blocks * layout_.block_stride);
}

template <typename C>
void PackedB<C>::Multiply(const C* a, int64_t lda, C* c, int64_t m, int64_t ldc) const {
  MultiplyBlocks(a, lda, c, m, ldc, 0, layout_.n_blocks);
}

template <typename C>
void PackedB<C>::MultiplyBlocks(const C* a, int64_t lda, C* c, int64_t m, int64_t ldc,
                                int64_t nb_begin, int64_t nb_end) const {
  if (data_ == nullptr) {  // k or n is 0
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t j = 0; j < layout_.n; ++j) c[r * ldc + j] = C(0);
    }
    return;
  }
  gemm_->a_packed_b(a, lda, data_, layout_, c, m, ldc, nb_begin, nb_end);
}

template class PackedB<float>;
template class PackedB<double>;

template const Gemm<float>* DefaultGemm<float>();
template const Gemm<double>* DefaultGemm<double>();
template const Gemm<float>& BestGemm<float>();
template const Gemm<double>& BestGemm<double>();
}  // namespace gemm

}  // namespace opforge
