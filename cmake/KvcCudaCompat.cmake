# SPDX-License-Identifier: Apache-2.0
# CMake < 3.26 does not know nvcc's C++20 flag (CUDA_STANDARD 20 fails at generate time
# with "requires the language dialect CUDA20"). nvcc >= 12.0 accepts -std=c++20.
# Include after enable_language(CUDA).
if(CMAKE_VERSION VERSION_LESS 3.26
   AND CMAKE_CUDA_COMPILER_ID STREQUAL "NVIDIA"
   AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0
   AND NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20)
  list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
endif()
