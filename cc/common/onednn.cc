// bfloat16 convolutions on oneDNN, opened at run time (see onednn.h).
#include "common/onednn.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/cpu_features.h"

#if OPFORGE_HAVE_ONEDNN
#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "common/scratch.h"
#endif

namespace opforge {
namespace onednn {

namespace {
std::atomic<bool> enabled{true};
}  // namespace

void SetEnabled(bool on) { enabled.store(on); }
bool Enabled() { return enabled.load(); }

#if OPFORGE_HAVE_ONEDNN

namespace {

// The C API functions used, resolved from the opened library.
struct Api {
#define OPFORGE_DNNL_FUNCTIONS(X)                            \
  X(dnnl_version)                                            \
  X(dnnl_engine_create)                                      \
  X(dnnl_stream_create)                                      \
  X(dnnl_stream_wait)                                        \
  X(dnnl_stream_destroy)                                     \
  X(dnnl_memory_desc_create_with_tag)                        \
  X(dnnl_memory_desc_destroy)                                \
  X(dnnl_memory_desc_get_size)                               \
  X(dnnl_memory_desc_equal)                                  \
  X(dnnl_memory_create)                                      \
  X(dnnl_memory_destroy)                                     \
  X(dnnl_primitive_attr_create)                              \
  X(dnnl_primitive_attr_destroy)                             \
  X(dnnl_primitive_attr_set_scratchpad_mode)                 \
  X(dnnl_primitive_attr_set_post_ops)                        \
  X(dnnl_post_ops_create)                                    \
  X(dnnl_post_ops_destroy)                                   \
  X(dnnl_post_ops_append_eltwise)                            \
  X(dnnl_convolution_forward_primitive_desc_create)          \
  X(dnnl_convolution_backward_data_primitive_desc_create)    \
  X(dnnl_convolution_backward_weights_primitive_desc_create) \
  X(dnnl_reorder_primitive_desc_create)                      \
  X(dnnl_matmul_primitive_desc_create)                       \
  X(dnnl_primitive_desc_query_md)                            \
  X(dnnl_primitive_desc_query)                               \
  X(dnnl_primitive_desc_destroy)                             \
  X(dnnl_primitive_create)                                   \
  X(dnnl_primitive_destroy)                                  \
  X(dnnl_primitive_execute)                                  \
  X(dnnl_get_effective_cpu_isa)                              \
  X(dnnl_set_max_cpu_isa)
#define OPFORGE_DNNL_MEMBER(name) decltype(&::name) name = nullptr;
  OPFORGE_DNNL_FUNCTIONS(OPFORGE_DNNL_MEMBER)
#undef OPFORGE_DNNL_MEMBER

  dnnl_engine_t engine = nullptr;
  std::string path;
  std::string why_not;  // empty where the path is on
};

// Whether the CPU multiplies bfloat16 natively (AVX512-BF16 or AMX-BF16) and the environment
// allows AVX-512. Without them oneDNN's bfloat16 convolutions convert to float as opforge's
// own bfloat16 path does, with nothing gained, so that path stays.
bool CpuHasBf16Products() {
#if defined(__x86_64__)
  return CpuHasAvx512() &&
         (__builtin_cpu_supports("avx512bf16") || __builtin_cpu_supports("amx-bf16"));
#else
  return false;
#endif
}

const Api& GetApi() {
  static const Api* api = [] {
    auto* a = new Api();
    const char* off = std::getenv("OPFORGE_ONEDNN");
    if (off != nullptr && std::strcmp(off, "0") == 0) {
      a->why_not = "disabled by OPFORGE_ONEDNN=0";
      return a;
    }
    if (!CpuHasAvx2Fma()) {
      a->why_not = "the CPU has no AVX2+FMA (or OPFORGE_MAX_ISA caps it below AVX2)";
      return a;
    }
    const char* env = std::getenv("OPFORGE_ONEDNN_LIBRARY");
    a->path = (env != nullptr && env[0] != '\0') ? env : "libdnnl.so.3";
    void* handle = dlopen(a->path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* err = dlerror();
      a->why_not = std::string("cannot open ") + a->path + " (" +
                   (err != nullptr ? err : "unknown error") +
                   "); pip install onednn-cpu-gomp==2023.2.0 provides it";
      return a;
    }
#define OPFORGE_DNNL_RESOLVE(name)                                     \
  a->name = reinterpret_cast<decltype(&::name)>(dlsym(handle, #name)); \
  if (a->name == nullptr) {                                            \
    a->why_not = a->path + " has no " #name " (not oneDNN 3.x)";       \
    return a;                                                          \
  }
    OPFORGE_DNNL_FUNCTIONS(OPFORGE_DNNL_RESOLVE)
#undef OPFORGE_DNNL_RESOLVE
    if (a->dnnl_version()->major != DNNL_VERSION_MAJOR) {
      a->why_not = a->path + " is oneDNN " + std::to_string(a->dnnl_version()->major) +
                   ".x, opforge needs " + std::to_string(DNNL_VERSION_MAJOR) + ".x";
      return a;
    }
    // OPFORGE_MAX_ISA=avx2 caps oneDNN's kernels here too (as ONEDNN_MAX_CPU_ISA would); it
    // must be said before oneDNN generates its first kernel.
    if (MaxIsaAllowed() < 2) a->dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx2);
    if (a->dnnl_engine_create(&a->engine, dnnl_cpu, 0) != dnnl_success) {
      a->why_not = "oneDNN could not create a CPU engine";
      return a;
    }
    return a;
  }();
  return *api;
}

// --- descriptors ------------------------------------------------------------------------------

// A memory descriptor owned here.
struct Md {
  dnnl_memory_desc_t md = nullptr;
  Md() = default;
  Md(const Md&) = delete;
  Md& operator=(const Md&) = delete;
  ~Md() {
    if (md != nullptr) GetApi().dnnl_memory_desc_destroy(md);
  }
  bool Create(std::array<int64_t, 4> dims, dnnl_data_type_t type, dnnl_format_tag_t tag) {
    dnnl_dims_t d = {dims[0], dims[1], dims[2], dims[3]};
    return GetApi().dnnl_memory_desc_create_with_tag(&md, 4, d, type, tag) == dnnl_success;
  }
  bool Create2(int64_t rows, int64_t cols, dnnl_data_type_t type, dnnl_format_tag_t tag) {
    dnnl_dims_t d = {rows, cols};
    return GetApi().dnnl_memory_desc_create_with_tag(&md, 2, d, type, tag) == dnnl_success;
  }
  bool Create1(int64_t n, dnnl_data_type_t type) {
    dnnl_dims_t d = {n};
    return GetApi().dnnl_memory_desc_create_with_tag(&md, 1, d, type, dnnl_a) == dnnl_success;
  }
};

struct Pd {
  dnnl_primitive_desc_t pd = nullptr;
  dnnl_primitive_t prim = nullptr;
  Pd() = default;
  Pd(const Pd&) = delete;
  Pd& operator=(const Pd&) = delete;
  ~Pd() {
    if (prim != nullptr) GetApi().dnnl_primitive_destroy(prim);
    if (pd != nullptr) GetApi().dnnl_primitive_desc_destroy(pd);
  }
  bool Make() { return GetApi().dnnl_primitive_create(&prim, pd) == dnnl_success; }
  const_dnnl_memory_desc_t Query(dnnl_query_t what) const {
    return GetApi().dnnl_primitive_desc_query_md(pd, what, 0);
  }
  size_t ScratchBytes() const {
    const_dnnl_memory_desc_t md = Query(dnnl_query_scratchpad_md);
    return md == nullptr ? 0 : GetApi().dnnl_memory_desc_get_size(md);
  }
};

struct Attr {
  dnnl_primitive_attr_t attr = nullptr;
  dnnl_post_ops_t ops = nullptr;
  Attr() = default;
  Attr(const Attr&) = delete;
  Attr& operator=(const Attr&) = delete;
  ~Attr() {
    if (ops != nullptr) GetApi().dnnl_post_ops_destroy(ops);
    if (attr != nullptr) GetApi().dnnl_primitive_attr_destroy(attr);
  }
  bool Create(bool leaky, float alpha) {
    const Api& api = GetApi();
    if (api.dnnl_primitive_attr_create(&attr) != dnnl_success) return false;
    if (api.dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) !=
        dnnl_success) {
      return false;
    }
    if (!leaky) return true;
    return api.dnnl_post_ops_create(&ops) == dnnl_success &&
           api.dnnl_post_ops_append_eltwise(ops, dnnl_eltwise_relu, alpha, 0.f) == dnnl_success &&
           api.dnnl_primitive_attr_set_post_ops(attr, ops) == dnnl_success;
  }
};

// A reorder between the plain HWIO filter and a primitive's blocked one (either way).
struct Reorder {
  Pd p;
  bool needed = false;
  bool Create(const_dnnl_memory_desc_t from, const_dnnl_memory_desc_t to) {
    const Api& api = GetApi();
    needed = api.dnnl_memory_desc_equal(from, to) == 0;
    if (!needed) return true;
    Attr attr;
    if (!attr.Create(false, 0.f)) return false;
    return api.dnnl_reorder_primitive_desc_create(&p.pd, from, api.engine, to, api.engine,
                                                  attr.attr) == dnnl_success &&
           p.Make();
  }
};

enum class Kind { kForward, kBackwardData, kBackwardWeights };

// The last filter a forward or input-gradient primitive reordered, kept for the next call with
// the same bytes: inference calls a convolution with the same weights again and again, and the
// reorder is a tenth of a 1x1 convolution's time on AMX (TensorFlow's grappler-fused kernel
// reorders on every call). A call compares the bytes in full, so a changed filter is always
// reordered. Training changes the weights every step; after two misses in a row only every
// 16th miss keeps a copy, so that a training step pays the copy's cost rarely. Filters above
// 2 MB are not kept (their reorder is a small part of their convolution), nor more than 128 MB
// in all.
struct FilterMemo {
  std::mutex mu;
  std::vector<uint8_t> plain;                       // the filter the blocked copy came from
  std::shared_ptr<const Scratch<uint8_t>> blocked;  // in the primitive's layout
  int misses = 0;                                   // in a row
};
constexpr size_t kMemoMaxFilter = size_t{2} << 20;
constexpr size_t kMemoBudget = size_t{128} << 20;
std::atomic<size_t> memo_bytes{0};

// One geometry's primitives: the convolution, the filter's reorder, the descriptors of the
// plain operands.
struct Entry {
  Md x, w, y, bias;  // plain: x, y NHWC/NCHW, w HWIO, bias float
  Pd forward_hint;   // backward kinds: the forward primitive descriptor oneDNN asks for
  Pd conv;
  Reorder filter;           // plain HWIO <-> conv's filter layout
  size_t filter_bytes = 0;  // the blocked filter's size
  bool ok = false;
  mutable FilterMemo memo;
  ~Entry() {
    if (memo.blocked) memo_bytes -= memo.plain.size() + memo.blocked->size();
  }
};

using Key = std::tuple<int, std::array<int64_t, 17>, bool, bool, float>;

bool Right(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t dilation, int64_t left,
           int64_t* right) {
  *right = (out - 1) * stride + (k - 1) * dilation + 1 - in - left;
  return *right >= 0 && left >= 0;
}

// A 1x1 stride-1 convolution without padding in NHWC as one matrix product [pixels, in_c] x
// [in_c, out_c] where oneDNN's matmul runs it faster than its 1x1 convolution: in bfloat16 (with
// AMX by a wide margin), and in float32 from 512 input channels (with AVX2 the product wins only
// there and loses below; with AVX-512 the two are about even). The 1x1 rows of `opforge bench
// fused_conv2d_bias_leaky_relu` (--dtype bfloat16, and with OPFORGE_MAX_ISA=avx2) show both sides.
bool Pointwise(const ConvShape& s, dnnl_data_type_t type) {
  return !s.nchw && s.filter_h == 1 && s.filter_w == 1 && s.stride_h == 1 && s.stride_w == 1 &&
         s.pad_top == 0 && s.pad_left == 0 && s.in_h == s.out_h && s.in_w == s.out_w &&
         (type == dnnl_bf16 || s.in_c >= 512);
}

std::unique_ptr<Entry> BuildMatmul(const ConvShape& s, dnnl_data_type_t type, bool bias, bool leaky,
                                   float alpha) {
  const Api& api = GetApi();
  auto e = std::make_unique<Entry>();
  const int64_t m = s.batch * s.in_h * s.in_w;
  Md w_any;
  if (!e->x.Create2(m, s.in_c, type, dnnl_ab) || !e->y.Create2(m, s.out_c, type, dnnl_ab) ||
      !e->w.Create2(s.in_c, s.out_c, type, dnnl_ab) ||
      !w_any.Create2(s.in_c, s.out_c, type, dnnl_format_tag_any) ||
      (bias && !e->bias.Create2(1, s.out_c, dnnl_f32, dnnl_ab))) {
    return e;
  }
  Attr attr;
  if (!attr.Create(leaky, alpha)) return e;
  if (api.dnnl_matmul_primitive_desc_create(&e->conv.pd, api.engine, e->x.md, w_any.md,
                                            bias ? e->bias.md : nullptr, e->y.md,
                                            attr.attr) != dnnl_success ||
      !e->conv.Make()) {
    return e;
  }
  const_dnnl_memory_desc_t blocked = e->conv.Query(dnnl_query_weights_md);
  if (blocked == nullptr) return e;
  e->filter_bytes = api.dnnl_memory_desc_get_size(blocked);
  e->ok = e->filter.Create(e->w.md, blocked);
  return e;
}

std::unique_ptr<Entry> Build(Kind kind, const ConvShape& s, dnnl_data_type_t type, bool bias,
                             bool leaky, float alpha) {
  const Api& api = GetApi();
  auto e = std::make_unique<Entry>();
  int64_t pad_bottom = 0, pad_right = 0;
  if (!Right(s.in_h, s.out_h, s.filter_h, s.stride_h, s.dilation_h, s.pad_top, &pad_bottom) ||
      !Right(s.in_w, s.out_w, s.filter_w, s.stride_w, s.dilation_w, s.pad_left, &pad_right)) {
    return e;  // not ok: oneDNN needs non-negative padding
  }
  if (kind == Kind::kForward && Pointwise(s, type)) return BuildMatmul(s, type, bias, leaky, alpha);
  const dnnl_format_tag_t act = s.nchw ? dnnl_nchw : dnnl_nhwc;
  if (!e->x.Create({s.batch, s.in_c, s.in_h, s.in_w}, type, act) ||
      !e->y.Create({s.batch, s.out_c, s.out_h, s.out_w}, type, act) ||
      !e->w.Create({s.out_c, s.in_c, s.filter_h, s.filter_w}, type, dnnl_hwio)) {
    return e;
  }
  Md w_any;
  if (!w_any.Create({s.out_c, s.in_c, s.filter_h, s.filter_w}, type, dnnl_format_tag_any)) {
    return e;
  }
  if (bias && !e->bias.Create1(s.out_c, dnnl_f32)) return e;
  dnnl_dims_t strides = {s.stride_h, s.stride_w};
  dnnl_dims_t dilates = {s.dilation_h - 1, s.dilation_w - 1};
  dnnl_dims_t pad_l = {s.pad_top, s.pad_left};
  dnnl_dims_t pad_r = {pad_bottom, pad_right};
  Attr attr;
  if (!attr.Create(leaky, alpha)) return e;
  if (kind == Kind::kForward) {
    if (api.dnnl_convolution_forward_primitive_desc_create(
            &e->conv.pd, api.engine, dnnl_forward_inference, dnnl_convolution_direct, e->x.md,
            w_any.md, bias ? e->bias.md : nullptr, e->y.md, strides, dilates, pad_l, pad_r,
            attr.attr) != dnnl_success) {
      return e;
    }
  } else {
    Attr plain;
    if (!plain.Create(false, 0.f)) return e;
    if (api.dnnl_convolution_forward_primitive_desc_create(
            &e->forward_hint.pd, api.engine, dnnl_forward_training, dnnl_convolution_direct,
            e->x.md, w_any.md, nullptr, e->y.md, strides, dilates, pad_l, pad_r,
            plain.attr) != dnnl_success) {
      return e;
    }
    const dnnl_status_t st =
        kind == Kind::kBackwardData
            ? api.dnnl_convolution_backward_data_primitive_desc_create(
                  &e->conv.pd, api.engine, dnnl_convolution_direct, e->x.md, w_any.md, e->y.md,
                  strides, dilates, pad_l, pad_r, e->forward_hint.pd, attr.attr)
            : api.dnnl_convolution_backward_weights_primitive_desc_create(
                  &e->conv.pd, api.engine, dnnl_convolution_direct, e->x.md, w_any.md, nullptr,
                  e->y.md, strides, dilates, pad_l, pad_r, e->forward_hint.pd, attr.attr);
    if (st != dnnl_success) return e;
  }
  if (!e->conv.Make()) return e;
  const_dnnl_memory_desc_t blocked = e->conv.Query(
      kind == Kind::kBackwardWeights ? dnnl_query_diff_weights_md : dnnl_query_weights_md);
  if (blocked == nullptr) return e;
  e->filter_bytes = api.dnnl_memory_desc_get_size(blocked);
  const bool ok = kind == Kind::kBackwardWeights ? e->filter.Create(blocked, e->w.md)
                                                 : e->filter.Create(e->w.md, blocked);
  if (!ok) return e;
  // The plain operands must be what the primitive takes (oneDNN may pick another layout for an
  // activation where it was given `any`; here none is, so this holds unless it refuses).
  e->ok = true;
  return e;
}

// The primitives of a geometry, created on first use. Bounded: cleared when full (a model has
// a few dozen geometries; a sweep over shapes should not keep thousands of JIT kernels).
// Shared: a call keeps its entry alive while another thread's lookup clears the cache.
std::shared_ptr<const Entry> Lookup(Kind kind, const ConvShape& s, dnnl_data_type_t type, bool bias,
                                    bool leaky, float alpha) {
  static std::mutex mu;
  static auto* cache = new std::map<Key, std::shared_ptr<const Entry>>();
  const Key key{static_cast<int>(kind),
                {s.batch, s.in_h, s.in_w, s.in_c, s.out_h, s.out_w, s.out_c, s.filter_h, s.filter_w,
                 s.stride_h, s.stride_w, s.dilation_h, s.dilation_w, s.pad_top, s.pad_left,
                 s.nchw ? 1 : 0, static_cast<int64_t>(type)},
                bias,
                leaky,
                leaky ? alpha : 0.f};
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache->find(key);
  if (it != cache->end()) return it->second;
  if (cache->size() >= 256) cache->clear();
  std::shared_ptr<const Entry> entry = Build(kind, s, type, bias, leaky, alpha);
  (*cache)[key] = entry;
  return entry;
}

// A memory object over a caller's buffer.
struct Mem {
  dnnl_memory_t m = nullptr;
  Mem(const_dnnl_memory_desc_t md, const void* data) {
    if (GetApi().dnnl_memory_create(&m, md, GetApi().engine, const_cast<void*>(data)) !=
        dnnl_success) {
      m = nullptr;
    }
  }
  ~Mem() {
    if (m != nullptr) GetApi().dnnl_memory_destroy(m);
  }
  Mem(const Mem&) = delete;
  Mem& operator=(const Mem&) = delete;
};

dnnl_stream_t ThreadStream() {
  struct Holder {
    dnnl_stream_t stream = nullptr;
    ~Holder() {
      if (stream != nullptr) GetApi().dnnl_stream_destroy(stream);
    }
  };
  thread_local Holder h;
  if (h.stream == nullptr &&
      GetApi().dnnl_stream_create(&h.stream, GetApi().engine, dnnl_stream_default_flags) !=
          dnnl_success) {
    h.stream = nullptr;
  }
  return h.stream;
}

// Runs one primitive with its scratchpad; the arguments' memory objects are the caller's.
bool Execute(const Pd& p, std::vector<dnnl_exec_arg_t> args) {
  const Api& api = GetApi();
  dnnl_stream_t stream = ThreadStream();
  if (stream == nullptr) return false;
  const size_t bytes = p.ScratchBytes();
  Scratch<uint8_t> scratch(bytes);
  std::unique_ptr<Mem> pad;
  if (bytes > 0) {
    pad = std::make_unique<Mem>(p.Query(dnnl_query_scratchpad_md), scratch.data());
    if (pad->m == nullptr) return false;
    args.push_back({DNNL_ARG_SCRATCHPAD, pad->m});
  }
  return api.dnnl_primitive_execute(p.prim, stream, static_cast<int>(args.size()), args.data()) ==
             dnnl_success &&
         api.dnnl_stream_wait(stream) == dnnl_success;
}

dnnl_data_type_t Type(DType type) { return type == DType::kBFloat16 ? dnnl_bf16 : dnnl_f32; }

bool Usable(const ConvShape& s, DType type) {
  return Enabled() && Available(type) && s.batch > 0 && s.in_h > 0 && s.in_w > 0 && s.in_c > 0 &&
         s.out_h > 0 && s.out_w > 0 && s.out_c > 0 && s.filter_h > 0 && s.filter_w > 0;
}

// The filter in the primitive's layout: the caller's buffer where the layouts agree, else the
// entry's memo of the same bytes, else a reorder (kept in the memo as FilterMemo says).
struct BlockedFilter {
  std::shared_ptr<const Scratch<uint8_t>> storage;
  std::unique_ptr<Mem> mem;
  bool Prepare(const Entry& e, const void* w) {
    if (!e.filter.needed) {
      mem = std::make_unique<Mem>(e.w.md, w);
      return mem->m != nullptr;
    }
    const_dnnl_memory_desc_t blocked_md = e.conv.Query(dnnl_query_weights_md);
    const size_t plain_bytes = GetApi().dnnl_memory_desc_get_size(e.w.md);
    FilterMemo& memo = e.memo;
    bool keep = false;
    {
      std::lock_guard<std::mutex> lock(memo.mu);
      if (memo.blocked && memo.plain.size() == plain_bytes &&
          std::memcmp(memo.plain.data(), w, plain_bytes) == 0) {
        memo.misses = 0;
        storage = memo.blocked;
      } else {
        ++memo.misses;
        keep = plain_bytes <= kMemoMaxFilter && (memo.misses <= 2 || memo.misses % 16 == 0);
      }
    }
    if (storage) {
      mem = std::make_unique<Mem>(blocked_md, storage->data());
      return mem->m != nullptr;
    }
    auto fresh = std::make_shared<Scratch<uint8_t>>(e.filter_bytes);
    mem = std::make_unique<Mem>(blocked_md, fresh->data());
    Mem plain(e.w.md, w);
    if (mem->m == nullptr || plain.m == nullptr ||
        !Execute(e.filter.p, {{DNNL_ARG_FROM, plain.m}, {DNNL_ARG_TO, mem->m}})) {
      return false;
    }
    storage = fresh;
    if (keep) {
      const size_t add = plain_bytes + fresh->size();
      std::lock_guard<std::mutex> lock(memo.mu);
      const size_t drop = memo.blocked ? memo.plain.size() + memo.blocked->size() : 0;
      if (memo_bytes.load() + add - drop <= kMemoBudget) {
        memo_bytes += add;
        memo_bytes -= drop;
        const auto* bytes = static_cast<const uint8_t*>(w);
        memo.plain.assign(bytes, bytes + plain_bytes);
        memo.blocked = fresh;
      }
    }
    return true;
  }
};

}  // namespace

bool Available(DType type) {
  static const bool loaded = GetApi().why_not.empty() && GetApi().engine != nullptr;
  // bfloat16 where the CPU multiplies it natively; float32 wherever the library opened (AVX2+FMA).
  return loaded && (type == DType::kFloat32 || CpuHasBf16Products());
}

bool Bf16Available() { return Available(DType::kBFloat16); }

std::string Describe() {
  const Api& api = GetApi();
  if (!api.why_not.empty()) return api.why_not;
  const dnnl_version_t* v = api.dnnl_version();
  const int isa = static_cast<int>(api.dnnl_get_effective_cpu_isa());
  std::string isa_name = "isa " + std::to_string(isa);
  // dnnl_cpu_isa_t values are bit masks; name the ones oneDNN's header defines.
  struct Named {
    dnnl_cpu_isa_t value;
    const char* name;
  };
  static const Named kNames[] = {{dnnl_cpu_isa_avx2, "avx2"},
                                 {dnnl_cpu_isa_avx512_core, "avx512_core"},
                                 {dnnl_cpu_isa_avx512_core_vnni, "avx512_core_vnni"},
                                 {dnnl_cpu_isa_avx512_core_bf16, "avx512_core_bf16"},
                                 {dnnl_cpu_isa_avx512_core_amx, "avx512_core_amx"},
                                 {dnnl_cpu_isa_avx512_core_fp16, "avx512_core_fp16"},
                                 {dnnl_cpu_isa_avx512_core_amx_fp16, "avx512_core_amx_fp16"}};
  for (const Named& n : kNames) {
    if (static_cast<int>(n.value) == isa) isa_name = n.name;
  }
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch) + " (" + api.path + "), ISA " + isa_name;
}

bool ConvForward(const ConvShape& s, DType type, const void* x, const void* w, const float* bias,
                 bool leaky, float alpha, void* y) {
  if (!Usable(s, type)) return false;
  const std::shared_ptr<const Entry> e =
      Lookup(Kind::kForward, s, Type(type), bias != nullptr, leaky, alpha);
  if (!e->ok) return false;
  BlockedFilter f;
  if (!f.Prepare(*e, w)) return false;
  Mem xm(e->x.md, x), ym(e->y.md, y);
  std::unique_ptr<Mem> bm;
  std::vector<dnnl_exec_arg_t> args = {
      {DNNL_ARG_SRC, xm.m}, {DNNL_ARG_WEIGHTS, f.mem->m}, {DNNL_ARG_DST, ym.m}};
  if (bias != nullptr) {
    bm = std::make_unique<Mem>(e->bias.md, bias);
    args.push_back({DNNL_ARG_BIAS, bm->m});
  }
  if (xm.m == nullptr || ym.m == nullptr || (bm && bm->m == nullptr)) return false;
  return Execute(e->conv, args);
}

bool ConvBackwardData(const ConvShape& s, DType type, const void* dy, const void* w, void* dx) {
  if (!Usable(s, type)) return false;
  const std::shared_ptr<const Entry> e =
      Lookup(Kind::kBackwardData, s, Type(type), false, false, 0.f);
  if (!e->ok) return false;
  BlockedFilter f;
  if (!f.Prepare(*e, w)) return false;
  Mem dym(e->y.md, dy), dxm(e->x.md, dx);
  if (dym.m == nullptr || dxm.m == nullptr) return false;
  return Execute(
      e->conv,
      {{DNNL_ARG_DIFF_DST, dym.m}, {DNNL_ARG_WEIGHTS, f.mem->m}, {DNNL_ARG_DIFF_SRC, dxm.m}});
}

bool ConvBackwardWeights(const ConvShape& s, DType type, const void* x, const void* dy, void* dw) {
  if (!Usable(s, type)) return false;
  const std::shared_ptr<const Entry> e =
      Lookup(Kind::kBackwardWeights, s, Type(type), false, false, 0.f);
  if (!e->ok) return false;
  Mem xm(e->x.md, x), dym(e->y.md, dy), plain(e->w.md, dw);
  if (xm.m == nullptr || dym.m == nullptr || plain.m == nullptr) return false;
  if (!e->filter.needed) {
    return Execute(
        e->conv,
        {{DNNL_ARG_SRC, xm.m}, {DNNL_ARG_DIFF_DST, dym.m}, {DNNL_ARG_DIFF_WEIGHTS, plain.m}});
  }
  Scratch<uint8_t> storage(e->filter_bytes);
  Mem blocked(e->conv.Query(dnnl_query_diff_weights_md), storage.data());
  if (blocked.m == nullptr) return false;
  return Execute(e->conv, {{DNNL_ARG_SRC, xm.m},
                           {DNNL_ARG_DIFF_DST, dym.m},
                           {DNNL_ARG_DIFF_WEIGHTS, blocked.m}}) &&
         Execute(e->filter.p, {{DNNL_ARG_FROM, blocked.m}, {DNNL_ARG_TO, plain.m}});
}

#else  // built without oneDNN's headers

bool Available(DType) { return false; }
bool Bf16Available() { return false; }
std::string Describe() {
  return "opforge was built without oneDNN's headers (pip install "
         "onednn-devel-cpu-gomp==2023.2.0, then rebuild)";
}
bool ConvForward(const ConvShape&, DType, const void*, const void*, const float*, bool, float,
                 void*) {
  return false;
}
bool ConvBackwardData(const ConvShape&, DType, const void*, const void*, void*) { return false; }
bool ConvBackwardWeights(const ConvShape&, DType, const void*, const void*, void*) { return false; }

#endif

}  // namespace onednn
}  // namespace opforge
