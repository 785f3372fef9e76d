// DUCC's real FFT of n points (ducc0::pocketfft_r, common/ducc.h) behind a plain class, so that
// one translation unit (real_fft.cc) instantiates DUCC's templates for every user: GriffinLim's
// CPU kernel and the SIMT runtime's cuFFT calls. DUCC's headers are heavy to compile (minutes per
// file under the sanitizers); here they are compiled once, with the core's vector ISA.
//
// Exec is DUCC's exec: the forward or inverse transform of `data` in FFTPACK's half-complex order
// (r0, r1, i1, r2, i2, ..., r(n/2) for an even n), unscaled but for `scale`, `work` holding
// bufsize() values; it returns where the result is (`data` or `work`). Vec is T (one transform) or
// FftLanes<T> (kFftLanes<T> transforms at once, lane l of value j at [j].v[l]).
#ifndef OPFORGE_COMMON_REAL_FFT_H_
#define OPFORGE_COMMON_REAL_FFT_H_

#include <cstddef>
#include <memory>
#include <type_traits>

namespace opforge {

// DUCC's SIMD width for T in the core's build (256-bit vectors: the core is compiled for AVX).
template <typename T>
constexpr int kFftLanes = std::is_same_v<T, double> ? 4 : 8;

// kFftLanes<T> values of T side by side: the layout of DUCC's vector of that width.
template <typename T>
struct alignas(sizeof(T) * kFftLanes<T>) FftLanes {
  T v[kFftLanes<T>];
  static constexpr int size() { return kFftLanes<T>; }
};

template <typename T>
class RealFft {
 public:
  explicit RealFft(size_t n);
  ~RealFft();
  RealFft(RealFft&&) noexcept;
  RealFft& operator=(RealFft&&) noexcept;

  size_t length() const;
  size_t bufsize() const;

  template <typename Vec>
  Vec* Exec(Vec* data, Vec* work, T scale, bool forward) const;

 private:
  struct Plan;
  std::unique_ptr<Plan> plan_;
};

extern template class RealFft<float>;
extern template class RealFft<double>;
extern template float* RealFft<float>::Exec(float*, float*, float, bool) const;
extern template double* RealFft<double>::Exec(double*, double*, double, bool) const;
extern template FftLanes<float>* RealFft<float>::Exec(FftLanes<float>*, FftLanes<float>*, float,
                                                      bool) const;
extern template FftLanes<double>* RealFft<double>::Exec(FftLanes<double>*, FftLanes<double>*,
                                                        double, bool) const;

}  // namespace opforge

#endif  // OPFORGE_COMMON_REAL_FFT_H_
