// LiteRT registration of mel_to_stft's forward op (common/lite_kernel.h).
#include "common/lite_kernel.h"
#include "ops/mel_to_stft/mel_to_stft_op.h"

namespace opforge {
namespace {

OPFORGE_LITE_OP(MelToStftOp, OPFORGE_MEL_TO_STFT_TYPES)

}  // namespace
}  // namespace opforge
