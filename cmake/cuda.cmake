# The CUDA backend (MPITRAIN_CUDA=ON): src/backend/cuda/*.cu and *.cpp, linked into mpitrain_core.
# Links the CUDA runtime and cuDNN only — never libcuda (the driver library), so every program
# starts on a machine without a driver and reports that no GPU is usable; cuBLASLt is loaded on
# its first call (src/backend/cuda/cublaslt_on_demand.cpp: linked, it cost every process ~0.55 s).
#
# Architectures: 80 (A100) and 90 (H100/H200) unless CMAKE_CUDA_ARCHITECTURES is given.
# Libraries: the toolkit's (find_package(CUDAToolkit)); cuDNN and NCCL under CUDNN_ROOT /
# NCCL_ROOT (environment or cache), the toolkit's directories, or /usr/local/cuda.

if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 80 90)
endif()
enable_language(CUDA)
# CMake 3.25 knows nvcc's flags only up to C++17; the CUDA code uses C++20 like the rest.
set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
set(CMAKE_CUDA_STANDARD 20)
find_package(CUDAToolkit REQUIRED)

set(_cuda_hints ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_LIBRARY_ROOT} /usr/local/cuda)
find_path(CUDNN_INCLUDE_DIR NAMES cudnn_graph.h HINTS ${_cuda_hints} ${CUDAToolkit_INCLUDE_DIRS}
          PATH_SUFFIXES include)
find_library(CUDNN_LIBRARY NAMES cudnn HINTS ${_cuda_hints} ${CUDAToolkit_LIBRARY_DIR}
             PATH_SUFFIXES lib64 lib)
if(NOT CUDNN_INCLUDE_DIR OR NOT CUDNN_LIBRARY)
  message(FATAL_ERROR "MPITRAIN_CUDA=ON but cuDNN 9 was not found (cudnn_graph.h, libcudnn): "
                      "set CUDNN_ROOT to its prefix, or configure with -DMPITRAIN_CUDA=OFF.")
endif()
# NCCL: for NcclCommunicator (src/comm/nccl_communicator.cu), built and linked where found.
set(_nccl_hints ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_ROOT} /usr/local/cuda)
find_path(NCCL_INCLUDE_DIR NAMES nccl.h HINTS ${_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS}
          PATH_SUFFIXES include)
find_library(NCCL_LIBRARY NAMES nccl HINTS ${_nccl_hints} ${CUDAToolkit_LIBRARY_DIR}
             PATH_SUFFIXES lib64 lib)
message(STATUS "CUDA ${CUDAToolkit_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES}; "
               "cuDNN ${CUDNN_LIBRARY}; NCCL ${NCCL_LIBRARY}")

file(GLOB MPITRAIN_CUDA_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/backend/cuda/*.cu
     ${CMAKE_SOURCE_DIR}/src/backend/cuda/*.cpp)
# An object library: its objects become part of mpitrain_core (which they call back into, for
# the error helpers), and its link requirements travel with it.
add_library(mpitrain_cuda OBJECT ${MPITRAIN_CUDA_SOURCES})
target_include_directories(mpitrain_cuda PUBLIC ${CMAKE_SOURCE_DIR}/include)
target_include_directories(mpitrain_cuda SYSTEM PUBLIC ${CUDNN_INCLUDE_DIR})
target_link_libraries(mpitrain_cuda PUBLIC CUDA::cudart ${CUDNN_LIBRARY} ${CMAKE_DL_LIBS})
# The directory's options are for the C++ compiler; nvcc gets its own (host flags via -Xcompiler).
set_property(TARGET mpitrain_cuda PROPERTY COMPILE_OPTIONS "")
target_compile_options(mpitrain_cuda PRIVATE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra $<$<BOOL:${MPITRAIN_WERROR}>:-Werror>
                            $<$<BOOL:${MPITRAIN_NATIVE}>:-march=native>>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra
                             $<$<BOOL:${MPITRAIN_WERROR}>:-Werror=all-warnings -Xcompiler=-Werror>>)
target_compile_definitions(mpitrain_cuda PUBLIC MPITRAIN_HAVE_CUDA=1)
# The communicators on device memory (src/comm/*.cu, which the C++ glob leaves out): MPI through
# pinned staging or, for a CUDA-aware MPI, on the device pointers, always; NCCL where found
# (MPITRAIN_HAVE_NCCL). MPI's headers only: mpitrain_core links MPI (its compile options are for
# the host compiler, not nvcc).
target_sources(mpitrain_cuda PRIVATE ${CMAKE_SOURCE_DIR}/src/comm/device_mpi_communicator.cu
                                     ${CMAKE_SOURCE_DIR}/src/comm/staged_communicator.cu
                                     ${CMAKE_SOURCE_DIR}/src/comm/cuda_aware_communicator.cu)
target_include_directories(mpitrain_cuda SYSTEM PRIVATE ${MPI_C_INCLUDE_DIRS})
if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
  target_sources(mpitrain_cuda PRIVATE ${CMAKE_SOURCE_DIR}/src/comm/nccl_communicator.cu)
  target_include_directories(mpitrain_cuda SYSTEM PUBLIC ${NCCL_INCLUDE_DIR})
  target_link_libraries(mpitrain_cuda PUBLIC ${NCCL_LIBRARY})
  target_compile_definitions(mpitrain_cuda PUBLIC MPITRAIN_HAVE_NCCL=1)
  add_executable(nccl-bench ${CMAKE_SOURCE_DIR}/bench/gpu/nccl_bench.cpp)  # nccl-tests style
  target_link_libraries(nccl-bench PRIVATE mpitrain_core)
endif()
target_link_libraries(mpitrain_core PUBLIC mpitrain_cuda)
set_target_properties(mpitrain_core PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}")

# The GPU benchmark (bench/gpu/run.sh runs it).
add_executable(op-bench ${CMAKE_SOURCE_DIR}/bench/gpu/op_bench.cpp)
target_link_libraries(op-bench PRIVATE mpitrain_core)
