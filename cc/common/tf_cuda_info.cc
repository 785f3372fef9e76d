// What the loaded module's CUDA kernels run on, read from the module itself for
// `opforge doctor` (python/opforge/tools/cuda_info.py): the CUDA runtime they register and launch
// through (its version, and which binary holds it: dladdr on the runtime's own entry point, so
// a runtime bound from another library would show), the driver's CUDA version and the devices.
// A plain C entry point, found by ctypes; in a build without the GPU binding it says so.
#include <dlfcn.h>

#include <cstdio>
#include <string>

#if GOOGLE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

void Append(std::string* out, const char* key, const std::string& value, bool quote) {
  if (out->size() > 1) *out += ", ";
  *out += "\"";
  *out += key;
  *out += "\": ";
  if (!quote) {
    *out += value;
    return;
  }
  *out += "\"";
  for (char c : value) {
    if (c == '"' || c == '\\') *out += '\\';
    *out += c;
  }
  *out += "\"";
}

}  // namespace

// Writes a JSON object into out (at most size bytes, NUL-terminated) and returns the length the
// whole object needs (as snprintf does; call again with a larger buffer when it is >= size).
extern "C" __attribute__((visibility("default"))) int OpforgeCudaInfo(char* out, int size) {
  std::string json = "{";
#if GOOGLE_CUDA
  Append(&json, "gpu_binding", "true", false);
  int runtime = 0;
  const cudaError_t runtime_err = cudaRuntimeGetVersion(&runtime);
  Append(&json, "runtime_version", std::to_string(runtime_err == cudaSuccess ? runtime : -1),
         false);
  Dl_info where{};
  const bool found = dladdr(reinterpret_cast<void*>(&cudaRuntimeGetVersion), &where) != 0 &&
                     where.dli_fname != nullptr;
  Append(&json, "runtime_in", found ? where.dli_fname : "unknown", true);
  int driver = 0;
  const cudaError_t driver_err = cudaDriverGetVersion(&driver);
  Append(&json, "driver_version", std::to_string(driver_err == cudaSuccess ? driver : 0), false);
  int count = 0;
  const cudaError_t count_err = cudaGetDeviceCount(&count);
  if (count_err != cudaSuccess) {
    count = 0;
    Append(&json, "device_error", cudaGetErrorString(count_err), true);
  }
  std::string devices = "[";
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    if (devices.size() > 1) devices += ", ";
    std::string one = "{";
    Append(&one, "name", prop.name, true);
    Append(&one, "capability", std::to_string(prop.major * 10 + prop.minor), false);
    Append(&one, "memory_bytes", std::to_string(prop.totalGlobalMem), false);
    one += "}";
    devices += one;
  }
  devices += "]";
  Append(&json, "devices", devices, false);
#else
  Append(&json, "gpu_binding", "false", false);
#endif
  json += "}";
  if (out != nullptr && size > 0) std::snprintf(out, static_cast<size_t>(size), "%s", json.c_str());
  return static_cast<int>(json.size());
}
