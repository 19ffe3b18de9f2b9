# Finds MPI for distop, preferring MPICH where both MPICH and Open MPI are installed: Debian's
# `mpicxx`/`mpiexec` alternatives may point at Open MPI, while the `.mpich` wrappers are always
# MPICH. Defines MPI::MPI_CXX and MPIEXEC_EXECUTABLE.

find_program(DISTOP_MPICH_CXX NAMES mpicxx.mpich)
find_program(DISTOP_MPICH_EXEC NAMES mpiexec.mpich)
if(DISTOP_MPICH_CXX AND NOT DEFINED MPI_CXX_COMPILER)
  set(MPI_CXX_COMPILER "${DISTOP_MPICH_CXX}" CACHE FILEPATH "MPI C++ compiler wrapper")
endif()
if(DISTOP_MPICH_EXEC AND NOT DEFINED MPIEXEC_EXECUTABLE)
  set(MPIEXEC_EXECUTABLE "${DISTOP_MPICH_EXEC}" CACHE FILEPATH "MPI launcher")
endif()
find_package(MPI REQUIRED COMPONENTS CXX)
