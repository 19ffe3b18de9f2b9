# The SimGrid SMPI variant (DISTOP_ENABLE_SMPI): distop and its programs compiled with smpicxx, to
# run under smpirun on a simulated platform (scripts/simulate.sh, docs/scaling.md).
#
# smpicxx links every program as a shared object that only smpirun can run, and runs all simulated
# ranks in one process: libdistop must be a shared library so that smpirun can privatise it (and
# Kokkos) per rank with --cfg=smpi/privatize-libs. Tests are off (they would need an smpirun
# wrapper); -DSMPI_NO_OVERRIDE_MALLOC keeps smpicxx from turning malloc/realloc/free into macros,
# which breaks Kokkos' headers (Kokkos::realloc). Release flags carry no -g, so the per-rank
# copies of the program that SMPI's privatisation makes stay small.
option(DISTOP_ENABLE_SMPI
       "Build with SimGrid's smpicxx for simulated runs under smpirun (set CMAKE_CXX_COMPILER=smpicxx)"
       OFF)
if(NOT DISTOP_ENABLE_SMPI)
  return()
endif()

get_filename_component(_distop_cxx_name "${CMAKE_CXX_COMPILER}" NAME)
if(NOT _distop_cxx_name MATCHES "^smpicxx")
  message(FATAL_ERROR
    "distop: DISTOP_ENABLE_SMPI needs SimGrid's compiler wrapper: configure a fresh build "
    "directory with -DCMAKE_CXX_COMPILER=smpicxx (Debian: libsimgrid-dev); this one is "
    "${CMAKE_CXX_COMPILER}")
endif()
find_program(DISTOP_SMPIRUN smpirun REQUIRED)
# FindMPI: smpicxx is the MPI compiler itself (the MPICH wrappers must not be preferred here).
set(MPI_CXX_COMPILER "${CMAKE_CXX_COMPILER}" CACHE FILEPATH "MPI C++ compiler wrapper" FORCE)
set(MPIEXEC_EXECUTABLE "${DISTOP_SMPIRUN}" CACHE FILEPATH "MPI launcher" FORCE)
set(BUILD_SHARED_LIBS ON)
set(DISTOP_ENABLE_TESTS OFF CACHE BOOL "Build the test suite" FORCE)
add_compile_definitions(DISTOP_SMPI=1 SMPI_NO_OVERRIDE_MALLOC)
add_compile_options("SHELL:-include ${CMAKE_CURRENT_LIST_DIR}/distop_smpi_undef.h")
string(REPLACE "-g" "" CMAKE_CXX_FLAGS_RELEASE "${CMAKE_CXX_FLAGS_RELEASE}")
message(STATUS "distop: SimGrid SMPI variant (${CMAKE_CXX_COMPILER}, run with ${DISTOP_SMPIRUN})")
