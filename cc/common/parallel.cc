#include "common/parallel.h"

#include <algorithm>
#include <thread>
#include <vector>

namespace opforge {

void ThreadParallel::For(int64_t total, double /*cost_per_unit*/, const Fn& fn) const {
  if (total <= 0) return;
  const int64_t shards = std::min<int64_t>(num_threads_, total);
  if (shards == 1) {
    fn(0, total);
    return;
  }
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(shards - 1));
  const int64_t block = (total + shards - 1) / shards;
  for (int64_t s = 1; s < shards; ++s) {
    const int64_t begin = s * block;
    const int64_t end = std::min(total, begin + block);
    if (begin >= end) break;
    threads.emplace_back([&fn, begin, end] { fn(begin, end); });
  }
  fn(0, std::min(total, block));
  for (auto& t : threads) t.join();
}

}  // namespace opforge
