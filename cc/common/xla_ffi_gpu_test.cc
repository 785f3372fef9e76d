// The CUDA platform's FFI handlers (OPFORGE_FFI_GPU_KERNELS, common/xla_ffi.h) from call frames
// as XLA:GPU builds them: operands and results in device memory, XLA's stream and its device
// allocator behind the FFI C API (a fake one here), attributes as TensorFlow's tf2xla kernel
// writes them. Each handler's results against the same op's CPU handler (OpforgeFfi_<ID>) on the
// same inputs; a size input's values only from the "opforge_values" attribute; a frame that does
// not fit the signature refused before any kernel runs. Built into the CUDA tests: on the SIMT
// runtime without a GPU (common/simt/), where the handlers run the ops' CUDA kernels on the CPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/cuda_test_util.h"
#include "common/xla_ffi.h"

extern "C" {
XLA_FFI_Error* OpforgeFfi_BiasLeakyRelu(XLA_FFI_CallFrame* frame);
XLA_FFI_Error* OpforgeFfiGpu_BiasLeakyRelu(XLA_FFI_CallFrame* frame);
XLA_FFI_Error* OpforgeFfi_Conv2DTranspose(XLA_FFI_CallFrame* frame);
XLA_FFI_Error* OpforgeFfiGpu_Conv2DTranspose(XLA_FFI_CallFrame* frame);
XLA_FFI_Error* OpforgeFfi_FusedBatchNormLeakyRelu(XLA_FFI_CallFrame* frame);
XLA_FFI_Error* OpforgeFfiGpu_FusedBatchNormLeakyRelu(XLA_FFI_CallFrame* frame);
}

namespace opforge {
namespace {

using test::DeviceBuffer;

// --- a fake FFI API: errors, the stream, device memory -----------------------------------------

struct FakeError {
  std::string message;
  XLA_FFI_Error_Code code;
};
int64_t g_allocations = 0;  // live device scratch blocks
int64_t g_allocated = 0;    // all, ever

XLA_FFI_Error* CreateError(XLA_FFI_Error_Create_Args* args) {
  return reinterpret_cast<XLA_FFI_Error*>(new FakeError{args->message, args->errc});
}
void GetMessage(XLA_FFI_Error_GetMessage_Args* args) {
  args->message = reinterpret_cast<FakeError*>(args->error)->message.c_str();
}
void DestroyError(XLA_FFI_Error_Destroy_Args* args) {
  delete reinterpret_cast<FakeError*>(args->error);
}
XLA_FFI_Error* GetStream(XLA_FFI_Stream_Get_Args* args) {
  args->stream = nullptr;  // the default stream
  return nullptr;
}
XLA_FFI_Error* Allocate(XLA_FFI_DeviceMemory_Allocate_Args* args) {
  if (cudaMalloc(&args->data, args->size) != cudaSuccess) {
    XLA_FFI_Error_Create_Args error{};
    error.message = "out of device memory";
    error.errc = XLA_FFI_Error_Code_RESOURCE_EXHAUSTED;
    return CreateError(&error);
  }
  ++g_allocations;
  ++g_allocated;
  return nullptr;
}
XLA_FFI_Error* Free(XLA_FFI_DeviceMemory_Free_Args* args) {
  cudaFree(args->data);
  --g_allocations;
  return nullptr;
}

XLA_FFI_Api FakeApi() {
  XLA_FFI_Api api{};
  api.struct_size = XLA_FFI_Api_STRUCT_SIZE;
  api.XLA_FFI_Error_Create = &CreateError;
  api.XLA_FFI_Error_GetMessage = &GetMessage;
  api.XLA_FFI_Error_Destroy = &DestroyError;
  api.XLA_FFI_Stream_Get = &GetStream;
  api.XLA_FFI_DeviceMemory_Allocate = &Allocate;
  api.XLA_FFI_DeviceMemory_Free = &Free;
  return api;
}

// --- attributes and call frames ----------------------------------------------------------------

// A custom call's attributes, as the tf2xla kernel writes them (sorted by name).
class Attrs {
 public:
  Attrs& String(const std::string& name, const std::string& value) {
    Entry& e = Add(name, XLA_FFI_AttrType_STRING);
    e.text = value;
    return *this;
  }
  Attrs& Float(const std::string& name, float value) {
    Entry& e = Add(name, XLA_FFI_AttrType_SCALAR);
    e.f32 = value;
    e.scalar_type = XLA_FFI_DataType_F32;
    return *this;
  }
  Attrs& Int(const std::string& name, int64_t value) {
    Entry& e = Add(name, XLA_FFI_AttrType_SCALAR);
    e.i64 = {value};
    e.scalar_type = XLA_FFI_DataType_S64;
    return *this;
  }
  Attrs& Ints(const std::string& name, std::vector<int64_t> values) {
    Entry& e = Add(name, XLA_FFI_AttrType_ARRAY);
    e.i64 = std::move(values);
    return *this;
  }
  // Points the frame's attributes here (valid while this object lives, unchanged).
  void Bind(XLA_FFI_Attrs* attrs) {
    std::sort(entries_.begin(), entries_.end(),
              [](const Entry& a, const Entry& b) { return a.name < b.name; });
    types_.clear();
    names_.clear();
    spans_.clear();
    values_.clear();
    spans_.reserve(entries_.size());
    for (Entry& e : entries_) {
      types_.push_back(e.type);
      spans_.push_back({e.name.data(), e.name.size()});
      if (e.type == XLA_FFI_AttrType_STRING) {
        e.span = {e.text.data(), e.text.size()};
        values_.push_back(&e.span);
      } else if (e.type == XLA_FFI_AttrType_SCALAR) {
        e.scalar = {e.scalar_type, e.scalar_type == XLA_FFI_DataType_F32
                                       ? static_cast<void*>(&e.f32)
                                       : static_cast<void*>(e.i64.data())};
        values_.push_back(&e.scalar);
      } else {
        e.array = {XLA_FFI_DataType_S64, e.i64.size(), e.i64.data()};
        values_.push_back(&e.array);
      }
    }
    for (XLA_FFI_ByteSpan& s : spans_) names_.push_back(&s);
    *attrs = {sizeof(XLA_FFI_Attrs), nullptr,       static_cast<int64_t>(entries_.size()),
              types_.data(),         names_.data(), values_.data()};
  }

 private:
  struct Entry {
    std::string name;
    XLA_FFI_AttrType type;
    std::string text;
    float f32 = 0;
    std::vector<int64_t> i64;
    XLA_FFI_DataType scalar_type = XLA_FFI_DataType_S64;
    XLA_FFI_ByteSpan span{};
    XLA_FFI_Scalar scalar{};
    XLA_FFI_Array array{};
  };
  Entry& Add(const std::string& name, XLA_FFI_AttrType type) {
    entries_.push_back(Entry());
    entries_.back().name = name;
    entries_.back().type = type;
    return entries_.back();
  }
  std::vector<Entry> entries_;
  std::vector<XLA_FFI_AttrType> types_;
  std::vector<XLA_FFI_ByteSpan> spans_;
  std::vector<XLA_FFI_ByteSpan*> names_;
  std::vector<void*> values_;
};

// A tensor of the call: its XLA element type, dims and bytes (host values, or a device copy).
struct Tensor {
  XLA_FFI_DataType dtype;
  std::vector<int64_t> dims;
  std::vector<char> bytes;
};

template <typename T>
Tensor MakeTensor(XLA_FFI_DataType dtype, std::vector<int64_t> dims, const std::vector<T>& v) {
  Tensor t{dtype, std::move(dims), std::vector<char>(v.size() * sizeof(T))};
  if (!v.empty()) std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

std::vector<float> Normal(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// Runs `handler` on the operands and results (their dims and types), in device memory
// (`device`) or host memory; returns the handler's error message ("" for none) and the results.
std::string RunHandler(XLA_FFI_Handler* handler, Attrs* attrs, const std::vector<Tensor>& operands,
                       std::vector<Tensor>* results, bool device) {
  XLA_FFI_Api api = FakeApi();
  std::vector<XLA_FFI_Buffer> args(operands.size()), rets(results->size());
  std::vector<XLA_FFI_ArgType> arg_types(operands.size(), XLA_FFI_ArgType_BUFFER);
  std::vector<XLA_FFI_RetType> ret_types(results->size(), XLA_FFI_RetType_BUFFER);
  std::vector<void*> arg_ptrs, ret_ptrs;
  std::vector<std::vector<int64_t>> dims;
  std::vector<DeviceBuffer> buffers(operands.size() + results->size());
  std::vector<std::vector<char>> host(operands.size() + results->size());
  auto place = [&](size_t slot, const Tensor& t, bool copy) -> void* {
    if (!device) {
      host[slot] = t.bytes;
      return host[slot].data();
    }
    EXPECT_EQ(buffers[slot].Allocate(t.bytes.size()), cudaSuccess);
    if (copy && !t.bytes.empty()) {
      EXPECT_EQ(
          cudaMemcpy(buffers[slot].get(), t.bytes.data(), t.bytes.size(), cudaMemcpyHostToDevice),
          cudaSuccess);
    }
    return buffers[slot].get();
  };
  dims.reserve(operands.size() + results->size());
  for (size_t i = 0; i < operands.size(); ++i) {
    dims.push_back(operands[i].dims);
    args[i] = {sizeof(XLA_FFI_Buffer),
               nullptr,
               operands[i].dtype,
               place(i, operands[i], true),
               static_cast<int64_t>(dims.back().size()),
               dims.back().data()};
    arg_ptrs.push_back(&args[i]);
  }
  for (size_t i = 0; i < results->size(); ++i) {
    const size_t slot = operands.size() + i;
    dims.push_back((*results)[i].dims);
    rets[i] = {sizeof(XLA_FFI_Buffer),
               nullptr,
               (*results)[i].dtype,
               place(slot, (*results)[i], false),
               static_cast<int64_t>(dims.back().size()),
               dims.back().data()};
    ret_ptrs.push_back(&rets[i]);
  }
  XLA_FFI_CallFrame frame{};
  frame.struct_size = sizeof(frame);
  frame.api = &api;
  frame.stage = XLA_FFI_ExecutionStage_EXECUTE;
  frame.args = {sizeof(XLA_FFI_Args), nullptr, static_cast<int64_t>(args.size()), arg_types.data(),
                arg_ptrs.data()};
  frame.rets = {sizeof(XLA_FFI_Rets), nullptr, static_cast<int64_t>(rets.size()), ret_types.data(),
                ret_ptrs.data()};
  attrs->Bind(&frame.attrs);
  std::string message;
  if (XLA_FFI_Error* error = handler(&frame)) {
    message = reinterpret_cast<FakeError*>(error)->message;
    delete reinterpret_cast<FakeError*>(error);
  }
  for (size_t i = 0; i < results->size(); ++i) {
    std::vector<char>& out = (*results)[i].bytes;
    if (device && message.empty() && !out.empty()) {
      EXPECT_EQ(cudaMemcpy(out.data(), rets[i].data, out.size(), cudaMemcpyDeviceToHost),
                cudaSuccess);
    } else if (!device) {
      out = host[operands.size() + i];
    }
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return message;
}

std::vector<float> Floats(const Tensor& t) {
  std::vector<float> v(t.bytes.size() / sizeof(float));
  if (!v.empty()) std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
  return v;
}

// The GPU handler's float results against the CPU handler's on the same call.
void ExpectGpuMatchesCpu(XLA_FFI_Handler* cpu, XLA_FFI_Handler* gpu, Attrs* attrs,
                         const std::vector<Tensor>& operands, const std::vector<Tensor>& results,
                         float tolerance) {
  std::vector<Tensor> on_cpu = results, on_gpu = results;
  for (Tensor& t : on_gpu) std::fill(t.bytes.begin(), t.bytes.end(), char(0x7f));
  ASSERT_EQ(RunHandler(cpu, attrs, operands, &on_cpu, /*device=*/false), "");
  ASSERT_EQ(RunHandler(gpu, attrs, operands, &on_gpu, /*device=*/true), "");
  for (size_t r = 0; r < results.size(); ++r) {
    const std::vector<float> want = Floats(on_cpu[r]), got = Floats(on_gpu[r]);
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], tolerance * (1.0f + std::fabs(want[i])))
          << "result " << r << ", element " << i;
    }
  }
}

TEST(FfiGpuHandler, BiasLeakyReluOnTheDeviceAsOnTheCpu) {
  Attrs attrs;
  attrs.String("T", "float32").Float("alpha", 0.1f);
  const std::vector<Tensor> in = {MakeTensor(XLA_FFI_DataType_F32, {2, 5, 24}, Normal(240, 1)),
                                  MakeTensor(XLA_FFI_DataType_F32, {24}, Normal(24, 2))};
  const std::vector<Tensor> out = {
      MakeTensor(XLA_FFI_DataType_F32, {2, 5, 24}, std::vector<float>(240))};
  ExpectGpuMatchesCpu(&OpforgeFfi_BiasLeakyRelu, &OpforgeFfiGpu_BiasLeakyRelu, &attrs, in, out,
                      0.0f);
}

TEST(FfiGpuHandler, FusedBatchNormWithParameterTypesAndScratch) {
  Attrs attrs;
  attrs.String("T", "float32").String("U", "float32").Float("epsilon", 1e-3f).Float("alpha", 0.2f);
  const std::vector<Tensor> in = {MakeTensor(XLA_FFI_DataType_F32, {3, 4, 5, 16}, Normal(960, 3)),
                                  MakeTensor(XLA_FFI_DataType_F32, {16}, Normal(16, 4)),
                                  MakeTensor(XLA_FFI_DataType_F32, {16}, Normal(16, 5))};
  const std::vector<Tensor> out = {
      MakeTensor(XLA_FFI_DataType_F32, {3, 4, 5, 16}, std::vector<float>(960)),
      MakeTensor(XLA_FFI_DataType_F32, {16}, std::vector<float>(16)),
      MakeTensor(XLA_FFI_DataType_F32, {16}, std::vector<float>(16))};
  g_allocations = 0;
  const int64_t before = g_allocated;
  ExpectGpuMatchesCpu(&OpforgeFfi_FusedBatchNormLeakyRelu, &OpforgeFfiGpu_FusedBatchNormLeakyRelu,
                      &attrs, in, out, 1e-5f);
  EXPECT_GT(g_allocated, before) << "the kernel's scratch came from XLA's allocator";
  EXPECT_EQ(g_allocations, 0) << "device scratch not given back";
}

Attrs Conv2DTransposeAttrs(bool with_values) {
  Attrs attrs;
  attrs.String("T", "float32")
      .String("Tshape", "int32")
      .Ints("strides", {1, 2, 2, 1})
      .String("padding", "SAME")
      .Ints("explicit_paddings", {})
      .String("data_format", "NHWC")
      .Ints("dilations", {1, 1, 1, 1});
  if (with_values) attrs.Ints(ffi::kValuesAttr, {2, 8, 8, 3});
  return attrs;
}

std::vector<Tensor> Conv2DTransposeInputs() {
  return {MakeTensor(XLA_FFI_DataType_F32, {2, 4, 4, 5}, Normal(160, 6)),
          MakeTensor(XLA_FFI_DataType_F32, {3, 3, 3, 5}, Normal(135, 7)),
          MakeTensor(XLA_FFI_DataType_S32, {4}, std::vector<int32_t>{2, 8, 8, 3})};
}

TEST(FfiGpuHandler, Conv2DTransposeTakesItsOutputShapeFromTheAttribute) {
  Attrs attrs = Conv2DTransposeAttrs(true);
  const std::vector<Tensor> out = {
      MakeTensor(XLA_FFI_DataType_F32, {2, 8, 8, 3}, std::vector<float>(384))};
  ExpectGpuMatchesCpu(&OpforgeFfi_Conv2DTranspose, &OpforgeFfiGpu_Conv2DTranspose, &attrs,
                      Conv2DTransposeInputs(), out, 1e-5f);

  // Without it, the device buffer of output_shape is not read: an error that says why.
  Attrs bare = Conv2DTransposeAttrs(false);
  std::vector<Tensor> results = out;
  EXPECT_EQ(
      RunHandler(&OpforgeFfiGpu_Conv2DTranspose, &bare, Conv2DTransposeInputs(), &results, true),
      "Opforge>Conv2DTranspose: on the GPU the values of operand 2 must come as the "
      "attribute 'opforge_values' (an i64 array; a compile-time constant)");
}

TEST(FfiGpuHandler, AFrameThatDoesNotFitTheSignatureIsRefusedBeforeAnyKernel) {
  Attrs attrs;
  attrs.String("T", "float32").Float("alpha", 0.1f);
  std::vector<Tensor> in = {MakeTensor(XLA_FFI_DataType_F32, {4, 8}, Normal(32, 8)),
                            MakeTensor(XLA_FFI_DataType_F64, {8}, std::vector<double>(8))};
  std::vector<Tensor> out = {MakeTensor(XLA_FFI_DataType_F32, {4, 8}, std::vector<float>(32))};
  EXPECT_EQ(RunHandler(&OpforgeFfiGpu_BiasLeakyRelu, &attrs, in, &out, true),
            "Opforge>BiasLeakyRelu: operand 1 (bias) must be float32, got float64");
  in.pop_back();
  EXPECT_EQ(RunHandler(&OpforgeFfiGpu_BiasLeakyRelu, &attrs, in, &out, true),
            "Opforge>BiasLeakyRelu: the call has 1 operands, the op takes 2 (features, bias)");
  Attrs half;
  half.String("T", "int32").Float("alpha", 0.1f);
  EXPECT_EQ(RunHandler(&OpforgeFfiGpu_BiasLeakyRelu, &half, in, &out, true),
            "Opforge>BiasLeakyRelu: T must be one of half, bfloat16, float32, float64, got int32");
}

}  // namespace
}  // namespace opforge
