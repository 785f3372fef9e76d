// The convolution core's matrix products (Conv2DTranspose, FusedConv2DBiasLeakyRelu), as a
// table of function pointers with three builds: the default one (gemm.cc, compiled like the
// rest of the core: AVX), one compiled for AVX2+FMA (gemm_fma_cpu.cc) and one for AVX-512
// (gemm_avx512_cpu.cc), the widest the CPU has picked at run time. TensorFlow's x86
// wheels require only AVX, so neither can be a compile-time assumption; Eigen's GEMM gains from
// FMA, and again from AVX-512 on CPUs with full-width 512-bit FMA units (`make core-bench`'s
// BM_Conv2DTranspose with OPFORGE_MAX_ISA=avx, =avx2 and unset compares the builds).
//
// Every product is Eigen's (no hand-written GEMM). Both builds give results within rounding
// of each other; on one machine the same build is always used, so results are reproducible
// and independent of the thread count.
#ifndef OPFORGE_COMMON_GEMM_H_
#define OPFORGE_COMMON_GEMM_H_

#include <cstddef>
#include <cstdint>

namespace opforge {

class Parallel;

namespace gemm {

// Where the blocks of a packed right operand B [k, n] lie (see Gemm::pack_b_block): Eigen's
// GEBP packs B^T in blocks of n_block columns of B by k_block rows, each block_stride elements
// from the previous one, block (nb, kb) at index nb * k_blocks + kb. A plain aggregate: this
// header is included by the per-ISA builds, so it defines nothing inline.
struct PackedLayout {
  int64_t k = 0, n = 0;
  int64_t k_block = 0, n_block = 0;  // Eigen's kc and mc for this product
  int64_t m_block = 0;               // rows of the left operand packed at a time
  int64_t k_blocks = 0, n_blocks = 0;
  int64_t block_stride = 0;  // elements, a multiple of 16 (64-byte alignment)
};

// All matrices row-major and contiguous.
template <typename C>
struct Gemm {
  // c[m, n] = a[m, k] * b[n, k]^T, rows of c ldc elements apart
  void (*a_bt)(const C* a, const C* b, C* c, int64_t m, int64_t k, int64_t n, int64_t ldc);
  // c[m, n] = a[m, k] * b[k, n]
  void (*a_b)(const C* a, const C* b, C* c, int64_t m, int64_t k, int64_t n);
  // c[m, n] += a[k, m]^T * b[k, n]
  void (*at_b_add)(const C* a, const C* b, C* c, int64_t m, int64_t k, int64_t n);
  // c[m, n] = a[m, k] * b[k, n] with rows of b ldb and rows of c ldc elements apart (a block of
  // columns of a wider product)
  void (*a_b_strided)(const C* a, const C* b, C* c, int64_t m, int64_t k, int64_t n, int64_t ldb,
                      int64_t ldc);

  // A right operand packed once and multiplied by many left operands (a convolution's filter
  // against every tile of its input): Eigen's own product packs both operands on every call,
  // which for a [4096, 512] filter and tiles of 256 rows costs about a third of the product.
  // The layout of B [k, n] packed for products with about m_hint rows on the left.
  PackedLayout (*packed_layout)(int64_t k, int64_t n, int64_t m_hint);
  // Packs block `index` (< n_blocks * k_blocks) of B, where B[kk, nn] = b[kk * ldb + nn], or
  // b[nn * ldb + kk] when `transposed`, into packed + index * block_stride (64-byte aligned).
  void (*pack_b_block)(const C* b, int64_t ldb, bool transposed, const PackedLayout& layout,
                       int64_t index, C* packed);
  // c[m, columns of blocks [nb_begin, nb_end)] = a[m, k] * B[:, those columns] for B packed by
  // this same table (nb: the index along n of a block); rows of a lda and rows of c ldc elements
  // apart, c pointing at column 0. Other columns of c are left as they are.
  void (*a_packed_b)(const C* a, int64_t lda, const C* packed, const PackedLayout& layout, C* c,
                     int64_t m, int64_t ldc, int64_t nb_begin, int64_t nb_end);
};

// The default build (always present).
template <typename C>
const Gemm<C>* DefaultGemm();
// The AVX2+FMA build, or null where it was not compiled or the CPU lacks AVX2 or FMA.
template <typename C>
const Gemm<C>* FmaGemm();
// The AVX-512 build (gemm_avx512_cpu.cc), or null where it was not compiled or the
// CPU lacks AVX-512 F/DQ/VL/BW.
template <typename C>
const Gemm<C>* Avx512Gemm();
// Avx512Gemm() where available, else FmaGemm(), else DefaultGemm(); decided once per process.
template <typename C>
const Gemm<C>& BestGemm();

// A right operand B [k, n] packed by `gemm` (blocks packed in parallel), for c = a * B with
// many a. Defined in gemm.cc (nothing inline here).
template <typename C>
class PackedB {
 public:
  // n_block_max > 0 caps the columns per block (for callers that split the columns).
  PackedB(const Gemm<C>& gemm, const C* b, int64_t ldb, bool transposed, int64_t k, int64_t n,
          int64_t m_hint, const Parallel& parallel, int64_t n_block_max = 0);
  ~PackedB();
  PackedB(const PackedB&) = delete;
  PackedB& operator=(const PackedB&) = delete;
  // c[m, n] = a[m, k] * B.
  void Multiply(const C* a, int64_t lda, C* c, int64_t m, int64_t ldc) const;
  // Only the columns of blocks [nb_begin, nb_end) (c pointing at column 0).
  void MultiplyBlocks(const C* a, int64_t lda, C* c, int64_t m, int64_t ldc, int64_t nb_begin,
                      int64_t nb_end) const;
  const PackedLayout& layout() const { return layout_; }
  // Whether every value of B is finite (checked while packing, where the values are in cache).
  bool finite() const { return finite_; }

 private:
  const Gemm<C>* gemm_;
  PackedLayout layout_;
  size_t Bytes() const;

  C* data_ = nullptr;
  bool finite_ = true;
};

}  // namespace gemm
}  // namespace opforge

#endif  // OPFORGE_COMMON_GEMM_H_
