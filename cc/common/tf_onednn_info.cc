// What the op library's bfloat16 convolutions run on (common/onednn.h), for Python
// (opforge._loader.onednn_status: the layers' choice of convolution, `opforge doctor`).
#include <algorithm>
#include <cstring>
#include <string>

#include "common/onednn.h"

// Writes "on: <description>; bfloat16 convolutions: yes|no" or "off: <why>" into out (at most size
// bytes, NUL-terminated) and returns the length the whole text needs (as snprintf does).
extern "C" __attribute__((visibility("default"))) int OpforgeOnednnInfo(char* out, int size) {
  using opforge::onednn::DType;
  const bool on = opforge::onednn::Available(DType::kFloat32);
  const std::string text = on ? "on: " + opforge::onednn::Describe() + "; bfloat16 convolutions: " +
                                    (opforge::onednn::Available(DType::kBFloat16) ? "yes" : "no")
                              : "off: " + opforge::onednn::Describe();
  if (out != nullptr && size > 0) {
    const size_t n = std::min(text.size(), static_cast<size_t>(size - 1));
    std::memcpy(out, text.data(), n);
    out[n] = '\0';
  }
  return static_cast<int>(text.size());
}
