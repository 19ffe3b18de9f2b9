# Finds Kokkos for distop and defines the imported target distop::kokkos.
#
# An upstream Kokkos 4 or 5 found by find_package(Kokkos CONFIG) is preferred (set Kokkos_ROOT or
# CMAKE_PREFIX_PATH to pick one). Debian's Trilinos packaging of Kokkos 3.4 ships a
# KokkosConfig.cmake that points at a non-existent include directory and targets without include
# paths; the version requests below reject it, and the headers and libraries are found directly.
#
# Sets DISTOP_KOKKOS_FLAVOR (upstream | trilinos), DISTOP_KOKKOS_VERSION (x.y.z),
# DISTOP_KOKKOS_HAS_CUDA (ON/OFF) and DISTOP_KOKKOS_NVCC (ON where nvcc compiles the code that uses
# Kokkos). An installed distopConfig.cmake sets
# DISTOP_KOKKOS_REQUIRED_FLAVOR and DISTOP_KOKKOS_HINT_DIR first, so that a consumer finds the
# Kokkos distop was built against rather than whichever comes first on its search path.

if(TARGET distop::kokkos)
  return()
endif()

set(DISTOP_KOKKOS_HAS_CUDA OFF)
set(DISTOP_KOKKOS_NVCC OFF)
if(NOT DISTOP_KOKKOS_REQUIRED_FLAVOR STREQUAL "trilinos")
  find_package(Kokkos 4 CONFIG QUIET HINTS ${DISTOP_KOKKOS_HINT_DIR})
  if(NOT Kokkos_FOUND)
    find_package(Kokkos 5 CONFIG QUIET HINTS ${DISTOP_KOKKOS_HINT_DIR})
  endif()
  # An upstream Kokkos that was asked for and not found is an error, not a silent fallback.
  if(NOT Kokkos_FOUND AND (DISTOP_KOKKOS_REQUIRED_FLAVOR STREQUAL "upstream" OR
                           (NOT "${Kokkos_ROOT}$ENV{Kokkos_ROOT}" STREQUAL "" AND
                            NOT CMAKE_DISABLE_FIND_PACKAGE_Kokkos)))
    message(FATAL_ERROR
      "distop: no upstream Kokkos 4/5 CMake package found (Kokkos_ROOT: '${Kokkos_ROOT}', "
      "ENV{Kokkos_ROOT}: '$ENV{Kokkos_ROOT}', hint: '${DISTOP_KOKKOS_HINT_DIR}'); point "
      "Kokkos_ROOT at the installation prefix of the Kokkos distop was built against.")
  endif()
endif()

if(Kokkos_FOUND AND TARGET Kokkos::kokkos)
  set(DISTOP_KOKKOS_FLAVOR upstream)
  set(DISTOP_KOKKOS_VERSION ${Kokkos_VERSION})
  add_library(distop::kokkos INTERFACE IMPORTED)
  set_target_properties(distop::kokkos PROPERTIES INTERFACE_LINK_LIBRARIES Kokkos::kokkos)
  if(DEFINED Kokkos_DEVICES AND "CUDA" IN_LIST Kokkos_DEVICES)
    set(DISTOP_KOKKOS_HAS_CUDA ON)
    if(Kokkos_CXX_COMPILER_ID STREQUAL "NVIDIA")
      set(DISTOP_KOKKOS_NVCC ON)
    endif()
  endif()
  message(STATUS "distop: upstream Kokkos ${Kokkos_VERSION} (devices: ${Kokkos_DEVICES})")
else()
  set(DISTOP_KOKKOS_FLAVOR trilinos)
  find_path(DISTOP_KOKKOS_INCLUDE_DIR Kokkos_Core.hpp PATH_SUFFIXES trilinos
            DOC "Directory holding Kokkos_Core.hpp (Debian: /usr/include/trilinos)")
  find_library(DISTOP_KOKKOS_CORE_LIBRARY NAMES trilinos_kokkoscore kokkoscore
               DOC "Kokkos core library (Debian: libtrilinos_kokkoscore.so)")
  if(NOT DISTOP_KOKKOS_INCLUDE_DIR OR NOT DISTOP_KOKKOS_CORE_LIBRARY)
    message(FATAL_ERROR
      "distop needs Kokkos: install Debian's libtrilinos-kokkos-dev, or point Kokkos_ROOT at an "
      "upstream Kokkos 4/5 installation (include: ${DISTOP_KOKKOS_INCLUDE_DIR}, "
      "library: ${DISTOP_KOKKOS_CORE_LIBRARY}).")
  endif()
  file(STRINGS "${DISTOP_KOKKOS_INCLUDE_DIR}/KokkosCore_config.h" _distop_kv
       REGEX "^#define KOKKOS_VERSION [0-9]+")
  string(REGEX REPLACE "^#define KOKKOS_VERSION ([0-9]+).*" "\\1" _distop_kv "${_distop_kv}")
  math(EXPR _distop_kv_major "${_distop_kv} / 10000")
  math(EXPR _distop_kv_minor "${_distop_kv} / 100 % 100")
  math(EXPR _distop_kv_patch "${_distop_kv} % 100")
  set(DISTOP_KOKKOS_VERSION ${_distop_kv_major}.${_distop_kv_minor}.${_distop_kv_patch})
  file(STRINGS "${DISTOP_KOKKOS_INCLUDE_DIR}/KokkosCore_config.h" _distop_kcuda
       REGEX "^#define KOKKOS_ENABLE_CUDA$")
  if(_distop_kcuda)
    set(DISTOP_KOKKOS_HAS_CUDA ON)
  endif()
  add_library(distop::kokkos INTERFACE IMPORTED)
  set_target_properties(distop::kokkos PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${DISTOP_KOKKOS_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${DISTOP_KOKKOS_CORE_LIBRARY};${CMAKE_DL_LIBS}")
  message(STATUS "distop: Kokkos ${DISTOP_KOKKOS_VERSION} from ${DISTOP_KOKKOS_INCLUDE_DIR} "
                 "(${DISTOP_KOKKOS_CORE_LIBRARY})")
endif()
