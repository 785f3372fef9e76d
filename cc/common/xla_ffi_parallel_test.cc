// FfiParallel (common/xla_ffi.cc) against a thread pool of this test's, behind the XLA FFI C API's
// three thread-pool entries: every unit runs exactly once, the caller is one of the pool's
// workers (threads - 1 tasks), a pool that runs its tasks late or refuses them leaves the work to
// the caller, and a pool of one thread (or none) runs everything on the caller. And CheckFrame:
// a call frame against an op's signature (operand and result counts, lists by their int attr,
// element types), before any op struct reads it.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/xla_ffi.h"

namespace opforge {
namespace {

using ffi::FfiParallel;

// What the fake API's entries act on; the FFI execution context handed to FfiParallel.
class FakePool {
 public:
  enum class Mode { kRun, kHold, kRefuse };

  FakePool(int64_t threads, Mode mode) : threads_(threads), mode_(mode) {
    if (mode == Mode::kRun) {
      for (int64_t t = 0; t < threads; ++t) workers_.emplace_back([this] { Work(); });
    }
  }
  ~FakePool() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    ready_.notify_all();
    for (std::thread& w : workers_) w.join();
    RunHeld();  // a held task may run after the For that scheduled it has returned
  }

  XLA_FFI_ExecutionContext* ctx() { return reinterpret_cast<XLA_FFI_ExecutionContext*>(this); }
  static FakePool* From(XLA_FFI_ExecutionContext* ctx) { return reinterpret_cast<FakePool*>(ctx); }

  XLA_FFI_Error* Schedule(XLA_FFI_Task* task, void* data) {
    scheduled_.fetch_add(1);
    if (mode_ == Mode::kRefuse) return reinterpret_cast<XLA_FFI_Error*>(this);  // any non-null
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      queue_.emplace_back(task, data);
    }
    ready_.notify_one();
    return nullptr;
  }
  void RunHeld() {
    std::deque<std::pair<XLA_FFI_Task*, void*>> held;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      held.swap(queue_);
    }
    for (auto& [task, data] : held) task(data);
  }

  int64_t threads() const { return threads_; }
  int64_t scheduled() const { return scheduled_.load(); }
  std::atomic<int64_t> errors_destroyed{0};

 private:
  void Work() {
    for (;;) {
      std::pair<XLA_FFI_Task*, void*> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        job = queue_.front();
        queue_.pop_front();
      }
      job.first(job.second);
    }
  }

  const int64_t threads_;
  const Mode mode_;
  std::atomic<int64_t> scheduled_{0};
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::pair<XLA_FFI_Task*, void*>> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

XLA_FFI_Error* Schedule(XLA_FFI_ThreadPool_Schedule_Args* args) {
  return FakePool::From(args->ctx)->Schedule(args->task, args->data);
}
XLA_FFI_Error* NumThreads(XLA_FFI_ThreadPool_NumThreads_Args* args) {
  *args->num_threads = FakePool::From(args->ctx)->threads();
  return nullptr;
}
// Only the refusing pool's errors reach here; they point at the pool.
void DestroyError(XLA_FFI_Error_Destroy_Args* args) {
  reinterpret_cast<FakePool*>(args->error)->errors_destroyed.fetch_add(1);
}

XLA_FFI_Api FakeApi() {
  XLA_FFI_Api api{};
  api.struct_size = XLA_FFI_Api_STRUCT_SIZE;
  api.XLA_FFI_ThreadPool_Schedule = &Schedule;
  api.XLA_FFI_ThreadPool_NumThreads = &NumThreads;
  api.XLA_FFI_Error_Destroy = &DestroyError;
  return api;
}

// Runs For(total) with a cost that makes every unit worth a chunk of its own; returns the
// threads that ran units. Every unit must run exactly once.
std::set<std::thread::id> RunAll(const Parallel& parallel, int64_t total) {
  std::vector<std::atomic<int>> runs(static_cast<size_t>(total));
  std::mutex mutex;
  std::set<std::thread::id> threads;
  parallel.For(total, 1e6, [&](int64_t begin, int64_t end) {
    EXPECT_LE(0, begin);
    EXPECT_LT(begin, end);
    EXPECT_LE(end, total);
    for (int64_t i = begin; i < end; ++i) runs[static_cast<size_t>(i)].fetch_add(1);
    const std::lock_guard<std::mutex> lock(mutex);
    threads.insert(std::this_thread::get_id());
  });
  for (int64_t i = 0; i < total; ++i) EXPECT_EQ(runs[static_cast<size_t>(i)].load(), 1) << i;
  return threads;
}

TEST(FfiParallel, EveryUnitOnceAndTheCallerIsAWorker) {
  const XLA_FFI_Api api = FakeApi();
  for (int64_t threads : {2, 3, 8}) {
    FakePool pool(threads, FakePool::Mode::kRun);
    const FfiParallel parallel(&api, pool.ctx());
    int64_t calls = 0;
    for (int64_t total : {2, 3, 7, 64, 1000}) {
      const std::set<std::thread::id> ran = RunAll(parallel, total);
      EXPECT_LE(ran.size(), static_cast<size_t>(threads)) << threads << " threads, " << total;
      ++calls;
      // threads - 1 tasks (fewer when there are fewer chunks than threads): with the caller,
      // as many threads as the pool has, never one more.
      EXPECT_LE(pool.scheduled(), calls * (threads - 1)) << threads << " threads, " << total;
    }
    EXPECT_GT(pool.scheduled(), 0);
  }
}

TEST(FfiParallel, SmallWorkStaysOnTheCaller) {
  const XLA_FFI_Api api = FakeApi();
  FakePool pool(4, FakePool::Mode::kRun);
  const FfiParallel parallel(&api, pool.ctx());
  std::set<std::thread::id> ran;
  parallel.For(1000, 1.0, [&](int64_t, int64_t) { ran.insert(std::this_thread::get_id()); });
  EXPECT_EQ(ran, std::set<std::thread::id>{std::this_thread::get_id()});
  EXPECT_EQ(pool.scheduled(), 0);
}

TEST(FfiParallel, APoolOfOneThreadOrNoneLeavesEverythingToTheCaller) {
  const XLA_FFI_Api api = FakeApi();
  FakePool one(1, FakePool::Mode::kRun);
  EXPECT_EQ(RunAll(FfiParallel(&api, one.ctx()), 100),
            std::set<std::thread::id>{std::this_thread::get_id()});
  EXPECT_EQ(one.scheduled(), 0);
  // No execution context: no pool to ask.
  EXPECT_EQ(RunAll(FfiParallel(&api, nullptr), 100),
            std::set<std::thread::id>{std::this_thread::get_id()});
}

TEST(FfiParallel, APoolThatRunsItsTasksLateLeavesTheWorkToTheCaller) {
  const XLA_FFI_Api api = FakeApi();
  FakePool pool(4, FakePool::Mode::kHold);
  const std::set<std::thread::id> ran = RunAll(FfiParallel(&api, pool.ctx()), 100);
  EXPECT_EQ(ran, std::set<std::thread::id>{std::this_thread::get_id()});
  EXPECT_EQ(pool.scheduled(), 3);
  pool.RunHeld();  // after For returned: the tasks find nothing left and touch nothing freed
}

TEST(FfiParallel, APoolThatRefusesLeavesTheWorkToTheCallerAndItsErrorIsFreed) {
  const XLA_FFI_Api api = FakeApi();
  FakePool pool(4, FakePool::Mode::kRefuse);
  const std::set<std::thread::id> ran = RunAll(FfiParallel(&api, pool.ctx()), 100);
  EXPECT_EQ(ran, std::set<std::thread::id>{std::this_thread::get_id()});
  EXPECT_EQ(pool.scheduled(), 1);  // the first refusal stops the scheduling
  EXPECT_EQ(pool.errors_destroyed.load(), 1);
}

// A call frame over buffers of the given element types (no data: CheckFrame reads none) and at
// most one int attribute.
class FakeFrame {
 public:
  FakeFrame(std::vector<XLA_FFI_DataType> args, std::vector<XLA_FFI_DataType> rets,
            const char* int_attr = nullptr, int64_t int_value = 0)
      : int_value_(int_value) {
    Fill(args, &args_, &arg_types_, &arg_ptrs_);
    Fill(rets, &rets_, &ret_types_, &ret_ptrs_);
    frame_.struct_size = sizeof(frame_);
    frame_.stage = XLA_FFI_ExecutionStage_EXECUTE;
    frame_.args = {sizeof(XLA_FFI_Args), nullptr, static_cast<int64_t>(args.size()),
                   arg_types_.data(), arg_ptrs_.data()};
    frame_.rets = {sizeof(XLA_FFI_Rets), nullptr, static_cast<int64_t>(rets.size()),
                   ret_types_.data(), ret_ptrs_.data()};
    if (int_attr != nullptr) {
      name_ = {int_attr, std::char_traits<char>::length(int_attr)};
      scalar_ = {XLA_FFI_DataType_S64, &int_value_};
      attr_type_ = XLA_FFI_AttrType_SCALAR;
      name_ptr_ = &name_;
      attr_ptr_ = &scalar_;
      frame_.attrs = {sizeof(XLA_FFI_Attrs), nullptr, 1, &attr_type_, &name_ptr_, &attr_ptr_};
    } else {
      frame_.attrs = {sizeof(XLA_FFI_Attrs), nullptr, 0, nullptr, nullptr, nullptr};
    }
  }
  const XLA_FFI_CallFrame& frame() const { return frame_; }

 private:
  template <typename Type>
  static void Fill(const std::vector<XLA_FFI_DataType>& dtypes, std::vector<XLA_FFI_Buffer>* bufs,
                   std::vector<Type>* types, std::vector<void*>* ptrs) {
    bufs->resize(dtypes.size());
    for (size_t i = 0; i < dtypes.size(); ++i) {
      (*bufs)[i] = {sizeof(XLA_FFI_Buffer), nullptr, dtypes[i], nullptr, 0, nullptr};
      types->push_back(static_cast<Type>(1));  // XLA_FFI_ArgType_BUFFER, XLA_FFI_RetType_BUFFER
      ptrs->push_back(&(*bufs)[i]);
    }
  }

  std::vector<XLA_FFI_Buffer> args_, rets_;
  std::vector<XLA_FFI_ArgType> arg_types_;
  std::vector<XLA_FFI_RetType> ret_types_;
  std::vector<void*> arg_ptrs_, ret_ptrs_;
  int64_t int_value_;
  XLA_FFI_ByteSpan name_{};
  XLA_FFI_Scalar scalar_{};
  XLA_FFI_AttrType attr_type_{};
  XLA_FFI_ByteSpan* name_ptr_ = nullptr;
  void* attr_ptr_ = nullptr;
  XLA_FFI_CallFrame frame_{};
};

std::string Check(const OpSignature& op, const FakeFrame& fake, DType t) {
  signature::Parsed parsed;
  const Status parse = signature::Parse(op, &parsed);
  EXPECT_TRUE(parse.ok()) << parse.message();
  const ffi::FfiAttrSource attrs(fake.frame().attrs, op.name);
  const Status s = ffi::CheckFrame(fake.frame(), attrs, parsed, t);
  return s.ok() ? "ok" : s.message();
}

constexpr XLA_FFI_DataType kF32 = XLA_FFI_DataType_F32;
constexpr XLA_FFI_DataType kF64 = XLA_FFI_DataType_F64;
constexpr XLA_FFI_DataType kS32 = XLA_FFI_DataType_S32;
constexpr XLA_FFI_DataType kS64 = XLA_FFI_DataType_S64;

TEST(CheckFrame, CountsAndElementTypesOfTheSignature) {
  constexpr OpSignature kOp{"Test>Decode", "features: T; anchors: T; size: Tshape",
                            "boxes: T; classes: int32",
                            "T: {float, double}; Tshape: {int32, int64} = DT_INT32"};
  EXPECT_EQ(Check(kOp, FakeFrame({kF32, kF32, kS64}, {kF32, kS32}), DType::kFloat), "ok");
  EXPECT_EQ(Check(kOp, FakeFrame({kF64, kF64, kS32}, {kF64, kS32}), DType::kDouble), "ok");
  EXPECT_EQ(Check(kOp, FakeFrame({kF32, kF32}, {kF32, kS32}), DType::kFloat),
            "Test>Decode: the call has 2 operands, the op takes 3 (features, anchors, size)");
  EXPECT_EQ(Check(kOp, FakeFrame({kF32, kF32, kS32}, {kF32}), DType::kFloat),
            "Test>Decode: the call has 1 results, the op gives 2 (boxes, classes)");
  EXPECT_EQ(Check(kOp, FakeFrame({kF32, kS32, kS32}, {kF32, kS32}), DType::kFloat),
            "Test>Decode: operand 1 (anchors) must be float32, got int32");
  EXPECT_EQ(Check(kOp, FakeFrame({kF32, kF32, kF32}, {kF32, kS32}), DType::kFloat),
            "Test>Decode: operand 2 (size) must be int32 or int64, got float32");
  EXPECT_EQ(Check(kOp, FakeFrame({kF32, kF32, kS32}, {kF32, kS64}), DType::kFloat),
            "Test>Decode: result 1 (classes) must be int32, got int64");
}

TEST(CheckFrame, ListsCountByTheirIntAttr) {
  constexpr OpSignature kOp{"Test>Post", "maps: n * T; limit: int32", "out: T",
                            "n: int >= 1; T: {float}"};
  EXPECT_EQ(Check(kOp, FakeFrame({kF32, kF32, kF32, kS32}, {kF32}, "n", 3), DType::kFloat), "ok");
  EXPECT_EQ(Check(kOp, FakeFrame({kF32, kF32, kS32}, {kF32}, "n", 3), DType::kFloat),
            "Test>Post: the call has 3 operands, the op takes 4 (maps (3: n), limit)");
  EXPECT_EQ(Check(kOp, FakeFrame({kF32, kS32, kS32}, {kF32}, "n", 2), DType::kFloat),
            "Test>Post: operand 1 (maps[1]) must be float32, got int32");
  EXPECT_NE(Check(kOp, FakeFrame({kF32, kS32}, {kF32}), DType::kFloat).find("no attribute 'n'"),
            std::string::npos);
}

}  // namespace
}  // namespace opforge
