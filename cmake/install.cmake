# The installable C++ package: `cmake --install` puts the headers, libringloader.so and a CMake
# package config under the prefix, so an outside project does
#
#   find_package(ringloader CONFIG REQUIRED)               # + COMPONENTS torch for the adaptor
#   target_link_libraries(app PRIVATE ringloader::ringloader)   # ringloader::torch
#
# The installed library is shared although the in-tree core is static: ringloader_core's private
# dependencies (libjpeg-turbo, liburing, libnuma, the static CUDA runtime) stay inside the shared
# object, so a consumer needs only Abseil and Threads, the two that appear in the public headers.
# The Python extension keeps linking the static core and is unaffected.
if(SKBUILD)
  # The wheel ships the extension and, next to it, the native CLI: the `ringloader-bench` console
  # script (ringloader/_cli.py) execs ringloader/bin/ringloader-bench. Inside the package, the
  # libraries `auditwheel repair` copies into ringloader.libs/ are found through its RPATH.
  if(TARGET ringloader-bench)
    install(TARGETS ringloader-bench RUNTIME DESTINATION ringloader/bin COMPONENT python)
  endif()
  return()
endif()

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(ringloader_stub "${CMAKE_CURRENT_BINARY_DIR}/ringloader_shared.cc")
if(NOT EXISTS "${ringloader_stub}")
  file(WRITE "${ringloader_stub}"
       "// libringloader.so: every object of ringloader_core, linked whole.\n")
endif()
add_library(ringloader SHARED "${ringloader_stub}")
add_library(ringloader::ringloader ALIAS ringloader)
target_link_libraries(ringloader
  PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,ringloader_core>"
  PUBLIC absl::status absl::statusor absl::strings absl::str_format Threads::Threads)
# Only the API: the public headers include nothing of csrc/ but each other (and Abseil), and the
# Loader keeps its internals behind a pointer (Loader::Impl), so none of them is installed.
target_include_directories(ringloader PUBLIC
  $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/csrc/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
set_target_properties(ringloader PROPERTIES
  OUTPUT_NAME ringloader
  VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}
  EXPORT_NAME ringloader)

install(TARGETS ringloader EXPORT ringloaderTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# The public headers (scripts/test_cpp_package.sh checks that nothing else is installed).
file(GLOB ringloader_public_headers "${CMAKE_CURRENT_SOURCE_DIR}/csrc/include/ringloader/*.h")
list(FILTER ringloader_public_headers EXCLUDE REGEX "/torch\\.h$")
install(FILES ${ringloader_public_headers} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ringloader)

set(ringloader_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/ringloader)
install(EXPORT ringloaderTargets NAMESPACE ringloader:: DESTINATION ${ringloader_cmake_dir})

# Optional LibTorch adaptor: a header and an interface target, in their own export set so the
# config loads them only when LibTorch is found.
if(TARGET ringloader_torch)
  install(TARGETS ringloader_torch EXPORT ringloaderTorchTargets)
  install(FILES "${CMAKE_CURRENT_SOURCE_DIR}/csrc/include/ringloader/torch.h"
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ringloader)
  install(EXPORT ringloaderTorchTargets NAMESPACE ringloader:: DESTINATION ${ringloader_cmake_dir})
endif()

configure_package_config_file(
  "${CMAKE_CURRENT_SOURCE_DIR}/cmake/ringloaderConfig.cmake.in"
  "${CMAKE_CURRENT_BINARY_DIR}/ringloaderConfig.cmake"
  INSTALL_DESTINATION ${ringloader_cmake_dir})
write_basic_package_version_file(
  "${CMAKE_CURRENT_BINARY_DIR}/ringloaderConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES
  "${CMAKE_CURRENT_BINARY_DIR}/ringloaderConfig.cmake"
  "${CMAKE_CURRENT_BINARY_DIR}/ringloaderConfigVersion.cmake"
  "${CMAKE_CURRENT_SOURCE_DIR}/cmake/ringloaderLibTorch.cmake"
  DESTINATION ${ringloader_cmake_dir})

if(TARGET ringloader-bench)
  install(TARGETS ringloader-bench RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
