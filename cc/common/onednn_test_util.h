// For the core tests of kernels with a oneDNN path (common/onednn.h): run a check on each path,
// opforge's own and oneDNN's, the latter skipped with a message where it cannot run here.
// Test code only; header-only.
#ifndef OPFORGE_COMMON_ONEDNN_TEST_UTIL_H_
#define OPFORGE_COMMON_ONEDNN_TEST_UTIL_H_

#include <Eigen/Core>
#include <iostream>
#include <type_traits>

#include "common/onednn.h"
#include "common/test_util.h"

namespace opforge {
namespace test {

// Selects opforge's own kernels (onednn false) or oneDNN's for T; false, with a line saying why,
// where T has no oneDNN path or oneDNN does not run here.
template <typename T>
bool UseOnednnPath(bool onednn) {
  onednn::SetEnabled(onednn);
  if (!onednn) return true;
  if constexpr (!std::is_same_v<T, float> && !std::is_same_v<T, Eigen::bfloat16>) {
    return false;
  } else {
    const onednn::DType type =
        std::is_same_v<T, float> ? onednn::DType::kFloat32 : onednn::DType::kBFloat16;
    if (!onednn::Available(type)) {
      std::cout << "[  SKIPPED ] the oneDNN path in " << TypeNames::GetName<T>(0)
                << ": not available here: " << onednn::Describe() << "\n";
      return false;
    }
    return true;
  }
}

// Puts oneDNN back on (the default) when a test that chose a path ends.
struct RestoreOnednn {
  ~RestoreOnednn() { onednn::SetEnabled(true); }
};

}  // namespace test
}  // namespace opforge

#endif  // OPFORGE_COMMON_ONEDNN_TEST_UTIL_H_
