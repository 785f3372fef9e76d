// LiteRT registration of element_mul's forward op (common/lite_kernel.h).
#include "common/lite_kernel.h"
#include "ops/element_mul/element_mul_op.h"

namespace opforge {
namespace {

OPFORGE_LITE_OP(ElementMulOp, OPFORGE_ELEMENT_MUL_TYPES)

}  // namespace
}  // namespace opforge
