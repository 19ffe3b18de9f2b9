# Finds Kokkos for distop and defines the imported target distop::kokkos.
#
# An upstream Kokkos 4 or 5 found by find_package(Kokkos CONFIG) is preferred (set Kokkos_ROOT or
# CMAKE_PREFIX_PATH to pick one). Debian's Trilinos packaging of Kokkos 3.4 ships a
# KokkosConfig.cmake that points at a non-existent include directory and targets without include
# paths; the version requests below reject it, and the headers and libraries are found directly.
#
# Sets DISTOP_KOKKOS_FLAVOR (upstream | trilinos) and DISTOP_KOKKOS_HAS_CUDA (ON/OFF).

if(TARGET distop::kokkos)
  return()
endif()

set(DISTOP_KOKKOS_HAS_CUDA OFF)
find_package(Kokkos 4 CONFIG QUIET)
if(NOT Kokkos_FOUND)
  find_package(Kokkos 5 CONFIG QUIET)
endif()

if(Kokkos_FOUND AND TARGET Kokkos::kokkos)
  set(DISTOP_KOKKOS_FLAVOR upstream)
  add_library(distop::kokkos INTERFACE IMPORTED)
  set_target_properties(distop::kokkos PROPERTIES INTERFACE_LINK_LIBRARIES Kokkos::kokkos)
  if(DEFINED Kokkos_DEVICES AND "CUDA" IN_LIST Kokkos_DEVICES)
    set(DISTOP_KOKKOS_HAS_CUDA ON)
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
  file(STRINGS "${DISTOP_KOKKOS_INCLUDE_DIR}/KokkosCore_config.h" _distop_kcuda
       REGEX "^#define KOKKOS_ENABLE_CUDA$")
  if(_distop_kcuda)
    set(DISTOP_KOKKOS_HAS_CUDA ON)
  endif()
  add_library(distop::kokkos INTERFACE IMPORTED)
  set_target_properties(distop::kokkos PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${DISTOP_KOKKOS_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${DISTOP_KOKKOS_CORE_LIBRARY};${CMAKE_DL_LIBS}")
  message(STATUS "distop: Kokkos ${_distop_kv} from ${DISTOP_KOKKOS_INCLUDE_DIR} "
                 "(${DISTOP_KOKKOS_CORE_LIBRARY})")
endif()
