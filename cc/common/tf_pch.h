// The TensorFlow headers every binding file needs, compiled once as a precompiled header.
#ifndef OPFORGE_COMMON_TF_PCH_H_
#define OPFORGE_COMMON_TF_PCH_H_

#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"

#endif  // OPFORGE_COMMON_TF_PCH_H_
