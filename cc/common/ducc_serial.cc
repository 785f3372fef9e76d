// The one scheduling function of DUCC's 1-D transforms (common/ducc.h), serial: opforge runs each
// transform on one of its own threads, with nthreads = 1, where DUCC still goes through
// execStatic for long complex passes.
#include <cstddef>
#include <functional>

#include "common/ducc.h"

namespace ducc0 {
namespace detail_threading {
namespace {

// One thread that takes all the work in one chunk.
class SerialScheduler final : public Scheduler {
 public:
  explicit SerialScheduler(size_t nwork) : nwork_(nwork) {}
  size_t num_threads() const override { return 1; }
  size_t thread_num() const override { return 0; }
  Range getNext() override {
    const Range r(taken_ ? nwork_ : 0, nwork_);
    taken_ = true;
    return r;
  }

 private:
  size_t nwork_;
  bool taken_ = false;
};

}  // namespace

void execStatic(size_t nwork, size_t /*nthreads*/, size_t /*chunksize*/,
                std::function<void(Scheduler&)> func) {
  SerialScheduler scheduler(nwork);
  func(scheduler);
}

}  // namespace detail_threading
}  // namespace ducc0
