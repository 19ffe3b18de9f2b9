# Installs the library, its headers and a CMake package: find_package(distop) then
# target_link_libraries(app distop::distop), distop::cli for the training programs' flags
# (include/distop/train/cli.hpp), and distop::watchdog beside them for the hang watchdog's watch of
# every blocking MPI call (include/distop/comm/watchdog.hpp).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS distop distop_watchdog distop_cli EXPORT distopTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/distop DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

get_target_property(_distop_type distop TYPE)
if(_distop_type STREQUAL "STATIC_LIBRARY")
  set(DISTOP_IS_STATIC ON)
else()
  set(DISTOP_IS_STATIC OFF)
endif()

set(DISTOP_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/distop)
install(EXPORT distopTargets NAMESPACE distop:: DESTINATION ${DISTOP_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/distopConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/distopConfig.cmake
                              INSTALL_DESTINATION ${DISTOP_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/distopConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/distopConfig.cmake ${PROJECT_BINARY_DIR}/distopConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/DistopMPI.cmake ${PROJECT_SOURCE_DIR}/cmake/DistopKokkos.cmake
        DESTINATION ${DISTOP_CMAKE_DIR})
