#include <Eigen/Core>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "common/arith.h"
#include "ops/swish/swish.h"
#include "ops/swish/swish_element.h"

namespace opforge {

Status ValidateSwish(const SwishParams& params) {
  if (params.size < 0) {
    return InvalidArgument("Swish", "features", "a tensor with a non-negative size", params.size);
  }
  return Status::Ok();
}

Status ValidateSwishGrad(const SwishParams& params, const std::vector<int64_t>& gradients,
                         const std::vector<int64_t>& features) {
  OPFORGE_RETURN_IF_ERROR(ValidateSwish(params));
  if (gradients != features) {
    return InvalidArgument("SwishGrad", "gradients",
                           "the shape of features " + ShapeString(features),
                           ShapeString(gradients));
  }
  return Status::Ok();
}

namespace {

namespace ei = Eigen::internal;

// How TensorFlow's Sigmoid kernel evaluates Eigen's logistic functor on this element type: in
// packets of kSize elements where the functor and the type have a packet form (Eigen's
// TensorEvaluator PacketAccess), one element at a time otherwise.
template <typename T>
struct Packets {
  using Packet = typename ei::packet_traits<T>::type;
  static constexpr int64_t kSize = ei::unpacket_traits<Packet>::size;
  static constexpr bool kVectorized =
      kSize > 1 && ei::functor_traits<ei::scalar_logistic_op<T>>::PacketAccess;
  // Elements per unit of the parallel-for: a whole packet, so that which elements take the packet
  // form never depends on how the range is split (the same bits for any thread count).
  static constexpr int64_t kUnit = kVectorized ? kSize : 1;
};

// About 40 cycles per element: Eigen's logistic (an exp polynomial and a division) and the
// products around it.
constexpr double kCostSwish = 40.0;

// The packet form, over n elements (a multiple of the packet size). Four packets per step, all
// loaded before any is stored (so y may alias x): four independent chains of the logistic's
// dependent operations in flight, as in TensorFlow's evaluator, which unrolls by four too: with
// one packet per step the chain's latency, not the vector units, sets the speed (`opforge bench
// swish` compares with TensorFlow's).
template <typename T>
void ForwardPackets(const T* x, T* y, int64_t n) {
  using P = Packets<T>;
  if constexpr (P::kVectorized) {
    using Packet = typename P::Packet;
    constexpr int64_t k = P::kSize;
    const ei::scalar_logistic_op<T> logistic;
    int64_t i = 0;
    for (; i + 4 * k <= n; i += 4 * k) {
      Packet v[4];
      for (int j = 0; j < 4; ++j) v[j] = ei::ploadu<Packet>(x + i + j * k);
      for (int j = 0; j < 4; ++j) v[j] = ei::pmul(v[j], logistic.packetOp(v[j]));
      for (int j = 0; j < 4; ++j) ei::pstoreu(y + i + j * k, v[j]);
    }
    for (; i < n; i += k) {
      const Packet v = ei::ploadu<Packet>(x + i);
      ei::pstoreu(y + i, ei::pmul(v, logistic.packetOp(v)));
    }
  }
}

// The scalar form (TensorFlow's tail, and every element of a type without packets).
template <typename T>
void ForwardScalars(const T* x, T* y, int64_t n) {
  const ei::scalar_logistic_op<T> logistic;
  for (int64_t i = 0; i < n; ++i) y[i] = SwishValue<T>(x[i], logistic(x[i]));
}

// SwishBackprop's order, g * (s * (1 + x * (1 - s))), on packets; four per step as above.
template <typename T>
void BackwardPackets(const T* g, const T* x, T* dx, int64_t n) {
  using P = Packets<T>;
  if constexpr (P::kVectorized) {
    using Packet = typename P::Packet;
    constexpr int64_t k = P::kSize;
    const ei::scalar_logistic_op<T> logistic;
    const Packet one = ei::pset1<Packet>(T(1.0f));
    const auto backprop = [&](const Packet& gv, const Packet& v) {
      const Packet s = logistic.packetOp(v);
      return ei::pmul(gv, ei::pmul(s, ei::padd(one, ei::pmul(v, ei::psub(one, s)))));
    };
    int64_t i = 0;
    for (; i + 4 * k <= n; i += 4 * k) {
      Packet v[4], gv[4];
      for (int j = 0; j < 4; ++j) {
        v[j] = ei::ploadu<Packet>(x + i + j * k);
        gv[j] = ei::ploadu<Packet>(g + i + j * k);
      }
      for (int j = 0; j < 4; ++j) v[j] = backprop(gv[j], v[j]);
      for (int j = 0; j < 4; ++j) ei::pstoreu(dx + i + j * k, v[j]);
    }
    for (; i < n; i += k) {
      ei::pstoreu(dx + i, backprop(ei::ploadu<Packet>(g + i), ei::ploadu<Packet>(x + i)));
    }
  }
}

template <typename T>
void BackwardScalars(const T* g, const T* x, T* dx, int64_t n) {
  const ei::scalar_logistic_op<T> logistic;
  for (int64_t i = 0; i < n; ++i) dx[i] = SwishBackprop<T>(g[i], x[i], logistic(x[i]));
}

// bfloat16 has 65,536 values, and y and the gradient's slope s (1 + x (1 - s)) depend on x
// alone: tables of both, built once by the kernels above (over every bit pattern, in packets
// where the type has them: the same function the loops apply), then a lookup per element; the
// gradient's last product, g * slope, in packets as BackwardPackets takes it. The same bits as
// evaluating each element, at a fraction of the cost (each bfloat16 operation of the logistic
// converts to float and rounds back).
struct Bf16Tables {
  std::vector<Eigen::bfloat16> y, slope;
};

const Bf16Tables& SwishBf16Tables() {
  static const Bf16Tables* tables = [] {
    using T = Eigen::bfloat16;
    constexpr int64_t kValues = 65536;  // a multiple of every packet size
    std::vector<T> x(kValues), ones(kValues, T(1.0f));
    for (int64_t i = 0; i < kValues; ++i)
      x[i] = Eigen::numext::bit_cast<T>(static_cast<uint16_t>(i));
    auto* t = new Bf16Tables{std::vector<T>(kValues), std::vector<T>(kValues)};
    if (Packets<T>::kVectorized) {
      ForwardPackets(x.data(), t->y.data(), kValues);
      // g = 1: the slope's own rounding, then 1 * slope (exact).
      BackwardPackets(ones.data(), x.data(), t->slope.data(), kValues);
    } else {
      ForwardScalars(x.data(), t->y.data(), kValues);
      BackwardScalars(ones.data(), x.data(), t->slope.data(), kValues);
    }
    return t;
  }();
  return *tables;
}

inline uint16_t Bits(Eigen::bfloat16 v) { return Eigen::numext::bit_cast<uint16_t>(v); }

void ForwardBf16(const Eigen::bfloat16* x, Eigen::bfloat16* y, int64_t n) {
  const Eigen::bfloat16* table = SwishBf16Tables().y.data();
  for (int64_t i = 0; i < n; ++i) y[i] = table[Bits(x[i])];
}

void BackwardBf16(const Eigen::bfloat16* g, const Eigen::bfloat16* x, Eigen::bfloat16* dx,
                  int64_t n) {
  using T = Eigen::bfloat16;
  const T* table = SwishBf16Tables().slope.data();
  if constexpr (Packets<T>::kVectorized) {
    using Packet = typename Packets<T>::Packet;
    constexpr int64_t k = Packets<T>::kSize;
    T slope[k];
    for (int64_t i = 0; i < n; i += k) {  // n: a multiple of k
      for (int64_t j = 0; j < k; ++j) slope[j] = table[Bits(x[i + j])];
      ei::pstoreu(dx + i, ei::pmul(ei::ploadu<Packet>(g + i), ei::ploadu<Packet>(slope)));
    }
  } else {
    for (int64_t i = 0; i < n; ++i) dx[i] = g[i] * table[Bits(x[i])];
  }
}

}  // namespace

template <typename T>
void SwishForward(const SwishParams& params, const T* x, T* y, const Parallel& parallel) {
  using P = Packets<T>;
  const int64_t units = params.size / P::kUnit;
  const int64_t tail = units * P::kUnit;
  parallel.For(units, kCostSwish * P::kUnit, [=](int64_t begin, int64_t end) {
    const int64_t b = begin * P::kUnit, n = (end - begin) * P::kUnit;
    if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
      ForwardBf16(x + b, y + b, n);
    } else if (P::kVectorized) {
      ForwardPackets(x + b, y + b, n);
    } else {
      ForwardScalars(x + b, y + b, n);
    }
  });
  ForwardScalars(x + tail, y + tail, params.size - tail);
}

template <typename T>
void SwishBackward(const SwishParams& params, const T* g, const T* x, T* dx,
                   const Parallel& parallel) {
  using P = Packets<T>;
  const int64_t units = params.size / P::kUnit;
  const int64_t tail = units * P::kUnit;
  parallel.For(units, kCostSwish * P::kUnit, [=](int64_t begin, int64_t end) {
    const int64_t b = begin * P::kUnit, n = (end - begin) * P::kUnit;
    if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
      BackwardBf16(g + b, x + b, dx + b, n);
    } else if (P::kVectorized) {
      BackwardPackets(g + b, x + b, dx + b, n);
    } else {
      BackwardScalars(g + b, x + b, dx + b, n);
    }
  });
  BackwardScalars(g + tail, x + tail, dx + tail, params.size - tail);
}

#define OPFORGE_INSTANTIATE(T, ...)                                                 \
  template void SwishForward<T>(const SwishParams&, const T*, T*, const Parallel&); \
  template void SwishBackward<T>(const SwishParams&, const T*, const T*, T*, const Parallel&);
OPFORGE_FLOAT_TYPES(OPFORGE_INSTANTIATE)
#undef OPFORGE_INSTANTIATE

}  // namespace opforge
