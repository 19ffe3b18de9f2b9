# Third-party dependencies other than MPI and Kokkos, all from Debian bookworm packages.

set(BLA_VENDOR OpenBLAS)
find_package(BLAS)
if(NOT BLAS_FOUND)
  unset(BLA_VENDOR)
  find_package(BLAS REQUIRED)
  set(DISTOP_HAVE_OPENBLAS OFF)
else()
  set(DISTOP_HAVE_OPENBLAS ON)
endif()
find_path(DISTOP_CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas x86_64-linux-gnu/openblas-pthread
          REQUIRED DOC "Directory holding cblas.h")

find_package(ZLIB REQUIRED)
find_package(nlohmann_json 3 CONFIG REQUIRED)
# The training driver's command-line flags (train/cli.hpp), header-only.
find_package(CLI11 CONFIG REQUIRED)

if(DISTOP_ENABLE_CUDA)
  find_package(CUDAToolkit REQUIRED)
endif()
if(DISTOP_ENABLE_NCCL)
  find_path(DISTOP_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} REQUIRED)
  find_library(DISTOP_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} REQUIRED)
endif()
