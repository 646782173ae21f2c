# Installs the tide library, its public headers and a CMake package, so that another
# project can do `find_package(tide REQUIRED)` and link `tide::tide` (cmake/consumer/ is
# the check CI builds). Does not install tests, benchmarks or examples.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(TIDE_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/tide)

install(TARGETS tide EXPORT tideTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# Headers keep their folders, so #include "core/tensor.h" works against the install as
# in-tree. `include` is the $<INSTALL_INTERFACE:include> of tide in CMakeLists.txt.
install(FILES tide.h DESTINATION include)
foreach(_tide_dir core ops nn dist train trace text)
  if(IS_DIRECTORY ${PROJECT_SOURCE_DIR}/${_tide_dir})
    install(DIRECTORY ${_tide_dir} DESTINATION include FILES_MATCHING PATTERN "*.h")
  endif()
endforeach()

install(EXPORT tideTargets NAMESPACE tide:: DESTINATION ${TIDE_INSTALL_CMAKEDIR})

# A static archive carries its private link dependencies to the consumer as
# $<LINK_ONLY:...> entries; tideConfig.cmake finds them again when this is ON.
get_target_property(_tide_type tide TYPE)
if(_tide_type STREQUAL "STATIC_LIBRARY")
  set(TIDE_STATIC ON)
else()
  set(TIDE_STATIC OFF)
endif()
configure_package_config_file(cmake/tideConfig.cmake.in
  ${PROJECT_BINARY_DIR}/tideConfig.cmake
  INSTALL_DESTINATION ${TIDE_INSTALL_CMAKEDIR})
# 0.x: a new minor version may break the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/tideConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tideConfig.cmake ${PROJECT_BINARY_DIR}/tideConfigVersion.cmake
  DESTINATION ${TIDE_INSTALL_CMAKEDIR})
