# The one CUDA mismatch the build cannot work around: opforge's kernels carry the static runtime
# of the nvcc that compiled them, and a CUDA runtime needs a driver at least as new as itself
# (CUDA 13.0 needs driver r580 or newer). Where this machine has a driver (nvidia-smi answers),
# a driver older than nvcc stops the configuration here, with the fix, instead of failing at the
# first kernel launch ("CUDA driver version is insufficient for CUDA runtime version").
# -DOPFORGE_CUDA_DRIVER_CHECK=OFF skips it (building for another machine than this one).
# TensorFlow's own runtime (TF_CUDA_VERSION, inside libtensorflow_framework.so.2) is a separate
# copy and may be older or newer: the two share the driver's primary context and the stream
# TensorFlow hands each kernel, nothing else.
option(OPFORGE_CUDA_DRIVER_CHECK "Fail when this machine's CUDA driver is older than nvcc" ON)
string(REGEX MATCH "^[0-9]+\\.[0-9]+" _nvcc_mm "${CMAKE_CUDA_COMPILER_VERSION}")
find_program(OPFORGE_NVIDIA_SMI nvidia-smi)
set(OPFORGE_DRIVER_CUDA "")
if(OPFORGE_NVIDIA_SMI)
  execute_process(COMMAND "${OPFORGE_NVIDIA_SMI}" OUTPUT_VARIABLE _smi ERROR_QUIET
                  RESULT_VARIABLE _smi_rc TIMEOUT 30)
  if(_smi_rc EQUAL 0)
    string(REGEX MATCH "CUDA Version: *([0-9]+\\.[0-9]+)" _m "${_smi}")
    set(OPFORGE_DRIVER_CUDA "${CMAKE_MATCH_1}")
  endif()
endif()
if(OPFORGE_DRIVER_CUDA)
  message(STATUS "opforge: CUDA driver supports CUDA ${OPFORGE_DRIVER_CUDA}; kernels compiled by "
                 "nvcc ${_nvcc_mm} with its static runtime; TensorFlow's runtime: "
                 "${TF_CUDA_VERSION}")
  if(OPFORGE_CUDA_DRIVER_CHECK AND OPFORGE_DRIVER_CUDA VERSION_LESS _nvcc_mm)
    message(FATAL_ERROR
      "opforge: nvcc ${_nvcc_mm} (${CMAKE_CUDA_COMPILER}) makes kernels that need a CUDA ${_nvcc_mm} "
      "driver, and this machine's driver supports CUDA ${OPFORGE_DRIVER_CUDA} only. Either update "
      "the NVIDIA driver, or compile with a toolkit no newer than the driver: "
      "-DCMAKE_CUDA_COMPILER=/usr/local/cuda-${OPFORGE_DRIVER_CUDA}/bin/nvcc (any toolkit from "
      "12.0 on; TensorFlow ${TF_VERSION} itself uses CUDA ${TF_CUDA_VERSION}). To build for "
      "another machine, pass -DOPFORGE_CUDA_DRIVER_CHECK=OFF.")
  endif()
else()
  message(STATUS "opforge: no CUDA driver here (nvidia-smi); the kernels will need a driver for "
                 "CUDA ${_nvcc_mm} or newer where they run")
endif()
