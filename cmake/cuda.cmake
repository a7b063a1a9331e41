# KOLO_CUDA: whether src/device/cuda (the CUDA runtime, kolo's CUDA kernels and NCCL) is
# built. AUTO (the default): when nvcc, the CUDA toolkit and NCCL are found, except in a
# sanitizer build (KOLO_SANITIZE). ON: the same, and configuring fails naming what is
# missing. OFF: never. The CPU build and its tests are the same either way; with CUDA, the
# device layer's tests also run on GPU 0 where there is one (and skip where there is none).
#
# Where to find them: nvcc on PATH, in CUDACXX, or /usr/local/cuda/bin; NCCL's header and
# library beside the toolkit's (or KOLO_NCCL_INCLUDE_DIR / KOLO_NCCL_LIBRARY).
# KOLO_CUDA_ARCHITECTURES: sm_90 (H100, H200) and its PTX, which newer GPUs compile at load.
#
# KOLO_DEVICE_PATH (OFF by default until it has run on a GPU, docs/gpu.md): links the CUDA
# device into kolo::kolo, so that CUDA tensors run through NCCL as they are instead of
# being staged through host memory. Needs KOLO_CUDA.
#
# Sets kolo_cuda (ON/OFF) for src/device/CMakeLists.txt.
set(KOLO_CUDA AUTO CACHE STRING "Build the CUDA device layer: AUTO, ON or OFF")
set_property(CACHE KOLO_CUDA PROPERTY STRINGS AUTO ON OFF)
set(KOLO_CUDA_ARCHITECTURES "90-real;90-virtual" CACHE STRING
    "CUDA architectures of kolo's kernels (CMAKE_CUDA_ARCHITECTURES)")

option(KOLO_DEVICE_PATH "Link the CUDA device (NCCL) into kolo: CUDA tensors run as they are" OFF)
set(kolo_cuda OFF)
set(kolo_cuda_missing "")
if(KOLO_CUDA STREQUAL "OFF")
  set(kolo_cuda_missing "KOLO_CUDA=OFF")
elseif(KOLO_SANITIZE AND KOLO_CUDA STREQUAL "AUTO")
  set(kolo_cuda_missing "a sanitizer build")
else()
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  find_package(CUDAToolkit QUIET)
  find_path(KOLO_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(KOLO_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib64)
  if(NOT CMAKE_CUDA_COMPILER)
    set(kolo_cuda_missing "no nvcc")
  elseif(NOT CUDAToolkit_FOUND)
    set(kolo_cuda_missing "no CUDA toolkit")
  elseif(NOT KOLO_NCCL_INCLUDE_DIR OR NOT KOLO_NCCL_LIBRARY)
    set(kolo_cuda_missing "no NCCL (nccl.h and libnccl)")
  else()
    set(CMAKE_CUDA_ARCHITECTURES ${KOLO_CUDA_ARCHITECTURES})
    enable_language(CUDA)
    # CMake 3.25 does not know that nvcc 12+ takes C++20: teach it, so that the C++20
    # the kolo libraries ask for holds for CUDA files too.
    if(NOT "cuda_std_20" IN_LIST CMAKE_CUDA_COMPILE_FEATURES
       AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
      list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
    endif()
    set(kolo_cuda ON)
  endif()
endif()
if(kolo_cuda)
  message(STATUS "kolo: CUDA device layer ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, "
                 "${KOLO_NCCL_LIBRARY}, architectures ${CMAKE_CUDA_ARCHITECTURES})")
elseif(KOLO_CUDA STREQUAL "ON")
  message(FATAL_ERROR "KOLO_CUDA=ON, but ${kolo_cuda_missing}: install the CUDA toolkit and "
                      "NCCL, or configure with -DKOLO_CUDA=AUTO or OFF")
else()
  message(STATUS "kolo: CUDA device layer OFF (${kolo_cuda_missing})")
endif()
if(KOLO_DEVICE_PATH AND NOT kolo_cuda)
  message(FATAL_ERROR "KOLO_DEVICE_PATH=ON needs the CUDA device layer, which is OFF "
                      "(${kolo_cuda_missing}): configure with -DKOLO_CUDA=ON on a machine with "
                      "the CUDA toolkit and NCCL, or without KOLO_DEVICE_PATH")
elseif(KOLO_DEVICE_PATH)
  message(STATUS "kolo: device path ON (CUDA tensors run through NCCL)")
endif()
