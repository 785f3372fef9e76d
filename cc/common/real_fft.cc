// The one instantiation of DUCC's real FFT (see real_fft.h).
#include "common/real_fft.h"

#include <type_traits>

#include "common/ducc.h"

namespace opforge {

template <typename T>
struct RealFft<T>::Plan {
  explicit Plan(size_t n) : fft(n) {}
  ducc0::pocketfft_r<T> fft;
};

template <typename T>
RealFft<T>::RealFft(size_t n) : plan_(std::make_unique<Plan>(n)) {}
template <typename T>
RealFft<T>::~RealFft() = default;
template <typename T>
RealFft<T>::RealFft(RealFft&&) noexcept = default;
template <typename T>
RealFft<T>& RealFft<T>::operator=(RealFft&&) noexcept = default;

template <typename T>
size_t RealFft<T>::length() const {
  return plan_->fft.length();
}
template <typename T>
size_t RealFft<T>::bufsize() const {
  return plan_->fft.bufsize();
}

template <typename T>
template <typename Vec>
Vec* RealFft<T>::Exec(Vec* data, Vec* work, T scale, bool forward) const {
  if constexpr (std::is_same_v<Vec, T>) {
    return plan_->fft.exec(data, work, scale, forward);
  } else {
    // FftLanes<T> as DUCC's vector of the same width (a vector type, which may alias T).
    using Simd = typename ducc0::detail_simd::simd_select<T, kFftLanes<T>>::type;
    static_assert(sizeof(Simd) == sizeof(Vec) && alignof(Simd) <= alignof(Vec),
                  "FftLanes<T> has the layout of DUCC's vector");
    Simd* const d = reinterpret_cast<Simd*>(data);
    Simd* const w = reinterpret_cast<Simd*>(work);
    Simd* const r = plan_->fft.exec(d, w, scale, forward);
    return r == d ? data : work;
  }
}

template class RealFft<float>;
template class RealFft<double>;
template float* RealFft<float>::Exec(float*, float*, float, bool) const;
template double* RealFft<double>::Exec(double*, double*, double, bool) const;
template FftLanes<float>* RealFft<float>::Exec(FftLanes<float>*, FftLanes<float>*, float,
                                               bool) const;
template FftLanes<double>* RealFft<double>::Exec(FftLanes<double>*, FftLanes<double>*, double,
                                                 bool) const;

}  // namespace opforge
