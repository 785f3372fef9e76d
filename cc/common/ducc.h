// DUCC (ducc0), the FFT library TensorFlow's own FFT ops run on, header-only from the copy
// TensorFlow ships in its include folder (include/external/ducc/src/ducc0; BSD-3-Clause or
// GPL-2.0-or-later at the user's choice, see its LICENSE there). CMake links that folder into the
// core's include directory as ducc0/.
//
// opforge uses its 1-D transforms (ducc0::pocketfft_r, ducc0::pocketfft_c) serially, on its own
// threads: DUCC's thread pool stays off (DUCC0_NO_LOWLEVEL_THREADING), and the one scheduling
// function those transforms reference is defined serially in ducc_serial.cc. Like every symbol of
// opforge's libraries, the instantiations of DUCC's templates are hidden, so they never interpose
// with the ones TensorFlow's libraries export (built with other flags and another threading).
#ifndef OPFORGE_COMMON_DUCC_H_
#define OPFORGE_COMMON_DUCC_H_

#ifndef DUCC0_NO_LOWLEVEL_THREADING
#define DUCC0_NO_LOWLEVEL_THREADING
#endif
#include "ducc0/fft/fft1d_impl.h"

#endif  // OPFORGE_COMMON_DUCC_H_
