// LiteRT registration of mfcc_to_mel's forward op (common/lite_kernel.h).
#include "common/lite_kernel.h"
#include "ops/mfcc_to_mel/mfcc_to_mel_op.h"

namespace opforge {
namespace {

OPFORGE_LITE_OP(MfccToMelOp, OPFORGE_MFCC_TO_MEL_TYPES)

}  // namespace
}  // namespace opforge
