// OPFORGE_HOST_DEVICE marks a function that both the host compiler and nvcc compile: scalar maths
// that the CPU and the CUDA kernels must compute identically is written once, in a header both
// include, so the two can never drift apart (bit-exactness between them is tested).
#ifndef OPFORGE_COMMON_HOST_DEVICE_H_
#define OPFORGE_COMMON_HOST_DEVICE_H_

#if defined(__CUDACC__)
#define OPFORGE_HOST_DEVICE __host__ __device__
#else
#define OPFORGE_HOST_DEVICE
#endif

#endif  // OPFORGE_COMMON_HOST_DEVICE_H_
