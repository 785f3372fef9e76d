// The sizes that choose a CUDA kernel's paths, shared by the kernels and their tests: the most
// blocks a grid-stride launch uses (past it, each thread loops), the caps of a 2-D grid's axes,
// and the largest index a kernel does in 32-bit arithmetic (past it, the 64-bit path). On a GPU:
// 2^16 blocks, 4096 x 65535, INT32_MAX. On the SIMT runtime (OPFORGE_SIMT for the kernels,
// OPFORGE_SIMT_TEST for their tests) all are scaled down, so that the tests reach the grid-stride
// loops and the 64-bit path at sizes a CPU runs in seconds: the same code paths, decided by smaller
// thresholds; what only the real sizes show (2^31 elements in memory, the overflow the 64-bit path
// avoids) needs a GPU. Header-only, no CUDA: the host-compiled tests include it too.
#ifndef OPFORGE_COMMON_CUDA_GEOMETRY_H_
#define OPFORGE_COMMON_CUDA_GEOMETRY_H_

#include <cstdint>

namespace opforge {
namespace cuda {

// kMaxGridBlocks2DX and kMaxGridBlocksY cap the two axes of the kernels that launch a 2-D grid
// (x over samples or frames, y over rows; y's cap is the hardware's limit of gridDim.y).
// kSimtGeometry says which set is in force (tests that pick their shapes by it).
#if defined(OPFORGE_SIMT) || defined(OPFORGE_SIMT_TEST)
constexpr bool kSimtGeometry = true;
constexpr int64_t kMaxGridBlocks = 64;
constexpr int64_t kInt32IndexLimit = (int64_t{1} << 22) - 1;
constexpr int64_t kMaxGridBlocks2DX = 4;
constexpr int64_t kMaxGridBlocksY = 63;
#else
constexpr bool kSimtGeometry = false;
constexpr int64_t kMaxGridBlocks = int64_t{1} << 16;
constexpr int64_t kInt32IndexLimit = INT32_MAX;
constexpr int64_t kMaxGridBlocks2DX = 4096;
constexpr int64_t kMaxGridBlocksY = 65535;
#endif

}  // namespace cuda
}  // namespace opforge

#endif  // OPFORGE_COMMON_CUDA_GEOMETRY_H_
