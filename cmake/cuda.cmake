# Decides COHORT_HAVE_CUDA. AUTO builds the GPU parts when nvcc, cuBLAS and NCCL are all found;
# ON insists on them; OFF skips them. Architectures: sm_90 (H100/H200) plus whatever GPU this
# machine reports through nvidia-smi, unless CMAKE_CUDA_ARCHITECTURES is given.
#
# Where things are, each a cache variable that scripts/gpu_check.sh sets when it has found them
# (a GPU host may carry NCCL and cuBLAS only inside PyTorch's wheels, nvidia-nccl-cu13 and
# nvidia-cublas, whose lib/ folders hold libnccl.so.2 and libcublas.so.13 without the unversioned
# names a plain find_library looks for):
#   CMAKE_CUDA_COMPILER    nvcc (default: /usr/local/cuda/bin/nvcc when present); its toolkit
#                          gives the CUDA runtime (CUDA::cudart)
#   NCCL_INCLUDE_DIR       the folder with nccl.h
#   NCCL_LIBRARY           libnccl.so or libnccl.so.2 (a full path)
#   COHORT_CUBLAS_INCLUDE_DIR, COHORT_CUBLAS_LIBRARY
#                          cublas_v2.h's (and cublasLt.h's) folder and libcublas.so[.13];
#                          empty: the toolkit's (CUDA::cublas, CUDA::cublasLt). cuBLASLt's
#                          library is the one beside libcublas (cuBLAS itself loads it).
# Defines the interface targets cohort_nccl (NCCL and the CUDA runtime) and cohort_cublas.
set(COHORT_HAVE_CUDA OFF)
set(COHORT_CUBLAS_INCLUDE_DIR "" CACHE PATH "cublas_v2.h's folder (empty: the CUDA toolkit's)")
set(COHORT_CUBLAS_LIBRARY "" CACHE FILEPATH "libcublas.so[.N] (empty: the CUDA toolkit's)")
if(NOT COHORT_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  # CMake 3.25's FindCUDAToolkit marks CUDA::nvToolsExt deprecated without checking that the
  # target exists (set_property fails, configure stops); CUDA 13 ships no nvToolsExt library, so
  # a fresh Debian 12 (CMake 3.25.1) with CUDA 13 cannot configure. An empty stand-in lets the
  # module pass; nothing here links it.
  if(CMAKE_VERSION VERSION_LESS 3.26 AND NOT TARGET CUDA::nvToolsExt)
    add_library(CUDA::nvToolsExt INTERFACE IMPORTED)
  endif()
  find_package(CUDAToolkit QUIET)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include
            DOC "the folder with nccl.h")
  # libnccl.so.2 by its full name too: the wheel ships no libnccl.so.
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${CUDAToolkit_LIBRARY_DIR}
               /usr/local/cuda/lib64 DOC "libnccl.so or libnccl.so.2")
  set(_cublas_ok OFF)
  if(COHORT_CUBLAS_LIBRARY)
    get_filename_component(_cublas_dir "${COHORT_CUBLAS_LIBRARY}" DIRECTORY)
    find_library(COHORT_CUBLASLT_LIBRARY NAMES cublasLt libcublasLt.so.13 libcublasLt.so.12
                 HINTS "${_cublas_dir}" NO_DEFAULT_PATH DOC "libcublasLt beside COHORT_CUBLAS_LIBRARY")
    if(EXISTS "${COHORT_CUBLAS_LIBRARY}" AND EXISTS "${COHORT_CUBLAS_INCLUDE_DIR}/cublas_v2.h"
       AND EXISTS "${COHORT_CUBLAS_INCLUDE_DIR}/cublasLt.h" AND COHORT_CUBLASLT_LIBRARY)
      set(_cublas_ok ON)
    else()
      message(FATAL_ERROR "COHORT_CUBLAS_LIBRARY=${COHORT_CUBLAS_LIBRARY} (with libcublasLt beside "
                          "it: '${COHORT_CUBLASLT_LIBRARY}') or COHORT_CUBLAS_INCLUDE_DIR="
                          "${COHORT_CUBLAS_INCLUDE_DIR} (with cublas_v2.h and cublasLt.h) does not "
                          "exist")
    endif()
  elseif(TARGET CUDA::cublas AND TARGET CUDA::cublasLt)
    set(_cublas_ok ON)
  endif()
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND AND NCCL_INCLUDE_DIR AND NCCL_LIBRARY AND _cublas_ok)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(_archs 90)
      find_program(NVIDIA_SMI nvidia-smi)
      if(NVIDIA_SMI)
        execute_process(COMMAND ${NVIDIA_SMI} --query-gpu=compute_cap --format=csv,noheader
                        OUTPUT_VARIABLE _caps RESULT_VARIABLE _rc ERROR_QUIET)
        if(_rc EQUAL 0)
          string(REPLACE "." "" _caps "${_caps}")
          string(REPLACE "\n" ";" _caps "${_caps}")
          foreach(_c IN LISTS _caps)
            string(STRIP "${_c}" _c)
            if(_c MATCHES "^[0-9]+$")
              list(APPEND _archs ${_c})
            endif()
          endforeach()
          list(REMOVE_DUPLICATES _archs)
        endif()
      endif()
      set(CMAKE_CUDA_ARCHITECTURES ${_archs})
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)  # nvcc with CMake 3.25 has no CUDA20 dialect
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    add_library(cohort_nccl INTERFACE)
    target_include_directories(cohort_nccl SYSTEM INTERFACE ${NCCL_INCLUDE_DIR})
    target_link_libraries(cohort_nccl INTERFACE ${NCCL_LIBRARY} CUDA::cudart)
    add_library(cohort_cublas INTERFACE)
    if(COHORT_CUBLAS_LIBRARY)
      target_include_directories(cohort_cublas SYSTEM INTERFACE ${COHORT_CUBLAS_INCLUDE_DIR})
      target_link_libraries(cohort_cublas INTERFACE ${COHORT_CUBLAS_LIBRARY}
                                                    ${COHORT_CUBLASLT_LIBRARY} CUDA::cudart)
    else()
      target_link_libraries(cohort_cublas INTERFACE CUDA::cublas CUDA::cublasLt CUDA::cudart)
    endif()
    set(COHORT_HAVE_CUDA ON)
    set(_cublas_shown ${CUDA_cublas_LIBRARY})
    if(COHORT_CUBLAS_LIBRARY)
      set(_cublas_shown ${COHORT_CUBLAS_LIBRARY})
    endif()
    message(STATUS "cohort: CUDA parts ON (archs ${CMAKE_CUDA_ARCHITECTURES}, NCCL ${NCCL_LIBRARY}, "
                   "cuBLAS ${_cublas_shown})")
  elseif(COHORT_CUDA STREQUAL "ON")
    message(FATAL_ERROR "COHORT_CUDA=ON but not all of the GPU build was found: nvcc "
                        "'${CMAKE_CUDA_COMPILER}', the CUDA toolkit (${CUDAToolkit_FOUND}), NCCL "
                        "(nccl.h in '${NCCL_INCLUDE_DIR}', library '${NCCL_LIBRARY}'), cuBLAS "
                        "(${_cublas_ok}). Set CMAKE_CUDA_COMPILER, NCCL_INCLUDE_DIR, NCCL_LIBRARY "
                        "or COHORT_CUBLAS_* (scripts/gpu_check.sh finds them), or configure with "
                        "-DCOHORT_CUDA=OFF")
  else()
    message(STATUS "cohort: CUDA parts OFF (nvcc, CUDA toolkit, cuBLAS or NCCL not found)")
  endif()
endif()
