# Run after each link of the GPU binding (cmake -DMODULE=... -DNM=... -DREADELF=... -P this):
# the module must carry its own CUDA runtime. It fails the build when a CUDA runtime symbol is
# left undefined (it would bind to the runtime libtensorflow_framework.so.2 exports, another
# CUDA version) or when the module asks for a shared libcudart.
execute_process(COMMAND "${NM}" -D --undefined-only "${MODULE}" OUTPUT_VARIABLE _undef
                RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "check_cuda_linkage: ${NM} failed on ${MODULE}")
endif()
# cufft*: cuFFT is static and hidden too, or opened by griffin_lim.cu itself, never left to
# the dynamic linker (TensorFlow's cuFFT is another CUDA version's).
string(REGEX MATCHALL "[ \t]U (__cuda[A-Za-z0-9_]*|cuda[A-Z][A-Za-z0-9_]*|cufft[A-Z][A-Za-z0-9_]*)"
       _bad "${_undef}")
if(_bad)
  string(REPLACE ";" "\n" _bad "${_bad}")
  message(FATAL_ERROR "check_cuda_linkage: ${MODULE} leaves CUDA runtime or cuFFT symbols undefined; "
                      "they would bind to TensorFlow's runtime:\n${_bad}\nThe static runtime "
                      "must come before TensorFlow's libraries on the link line.")
endif()
execute_process(COMMAND "${READELF}" -d "${MODULE}" OUTPUT_VARIABLE _dyn)
if(_dyn MATCHES "NEEDED[^\n]*libcufft")
  message(FATAL_ERROR "check_cuda_linkage: ${MODULE} needs a shared libcufft; opforge links the "
                      "static cuFFT or opens the toolkit's at run time")
endif()
if(_dyn MATCHES "NEEDED[^\n]*libcudart")
  message(FATAL_ERROR "check_cuda_linkage: ${MODULE} needs a shared libcudart; opforge links "
                      "the static runtime")
endif()
execute_process(COMMAND "${NM}" -D --defined-only "${MODULE}" OUTPUT_VARIABLE _def)
if(_def MATCHES "[ \t][TW] (__cuda|cuda[A-Z]|cufft[A-Z])")
  message(FATAL_ERROR "check_cuda_linkage: ${MODULE} exports CUDA runtime symbols; the static "
                      "runtime must stay hidden (-Wl,--exclude-libs,libcudart_static.a)")
endif()
message(STATUS "check_cuda_linkage: ${MODULE}: CUDA runtime static and private, no CUDA symbol "
               "left to TensorFlow's runtime")
