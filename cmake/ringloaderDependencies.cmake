# Third-party library lookup for ringloader.
#
#   ringloader_find_pkg(<PREFIX> <pkg-config module>... [OPTIONAL])
#       pkg_check_modules(<PREFIX> IMPORTED_TARGET ...) -> PkgConfig::<PREFIX>. A missing required
#       module is remembered, and ringloader_check_dependencies() then stops with one message
#       naming every missing one with its Debian/Ubuntu and Fedora package.
#   ringloader_require(<found> <what> <debian/ubuntu package> <fedora package>)
#       the same for a dependency found another way (a CMake package config).
#
# RINGLOADER_STATIC_DEPS=ON (the wheel build sets it) links each PkgConfig::<PREFIX> from its
# static archives instead, so the wheel does not carry that shared library. An archive can only
# go into the Python extension (a shared object) if it was compiled position-independent:
# Debian's liburing.a, libwebp.a, libwebpdemux.a, libz.a and libdeflate.a are, but its libjpeg.a, libnuma.a and
# libabsl_*.a are built -fPIE, whose references to libc/libstdc++ data (stderr, vtables) and
# local-exec TLS cannot be relocated in a shared object. Each dependency is therefore checked by linking its archives into
# a scratch shared object; one that fails stays shared and `auditwheel repair` copies its .so into
# the wheel (ringloader.libs/). The archives' symbols are hidden (--exclude-libs), so they never
# clash with another copy of the same library in the process (torch's, Pillow's).
include_guard(GLOBAL)
find_package(PkgConfig)

option(RINGLOADER_STATIC_DEPS
       "Link pkg-config dependencies from their static archives where those are position-independent" OFF)

# Packages that provide each dependency: "<debian/ubuntu>|<fedora>".
set(ringloader_pkg_liburing "liburing-dev|liburing-devel")
set(ringloader_pkg_libjpeg "libjpeg-dev (libjpeg62-turbo-dev, libjpeg-turbo8-dev)|libjpeg-turbo-devel")
set(ringloader_pkg_numa "libnuma-dev|numactl-devel")
set(ringloader_pkg_spng "libspng-dev|libspng-devel")
set(ringloader_pkg_libwebp "libwebp-dev|libwebp-devel")
set(ringloader_pkg_libwebpdemux "libwebp-dev|libwebp-devel")
set(ringloader_pkg_zlib "zlib1g-dev|zlib-devel")
set(ringloader_pkg_libdeflate "libdeflate-dev|libdeflate-devel")
set(ringloader_pkg_libtiff-4 "libtiff-dev|libtiff-devel")
set(ringloader_pkg_libcurl "libcurl4-openssl-dev|libcurl-devel")

function(ringloader_require found what debian fedora)
  if(NOT found)
    set_property(GLOBAL APPEND PROPERTY RINGLOADER_MISSING_DEPENDENCIES
                 "  ${what}: Debian/Ubuntu: ${debian}   Fedora: ${fedora}")
  endif()
endfunction()

function(ringloader_check_dependencies)
  if(RINGLOADER_STATIC_DEPS)
    set(report ${RINGLOADER_STATIC_REPORT})  # unquoted: drops the empty first item
    list(JOIN report ", " report)
    message(STATUS "ringloader: RINGLOADER_STATIC_DEPS: ${report}")
  endif()
  get_property(missing GLOBAL PROPERTY RINGLOADER_MISSING_DEPENDENCIES)
  if(missing)
    list(JOIN missing "\n" lines)
    message(FATAL_ERROR "ringloader: missing build dependencies; install these packages:\n${lines}")
  endif()
endfunction()

# Replaces PkgConfig::<prefix>'s libraries by their archives when all of them exist and link into
# a shared object; otherwise leaves it shared and says why.
function(_ringloader_link_static prefix)
  set(archives "")
  set(system_libs "")
  foreach(lib IN LISTS ${prefix}_STATIC_LIBRARIES)
    if(lib MATCHES "^(m|dl|rt|pthread|c|gcc_s|stdc\\+\\+)$")
      list(APPEND system_libs "${lib}")  # glibc/toolchain: always shared
      continue()
    endif()
    unset(archive)  # find_library skips the search while the variable holds a path
    find_library(archive NAMES "lib${lib}.a" HINTS ${${prefix}_STATIC_LIBRARY_DIRS} NO_CACHE)
    if(NOT archive)
      set(RINGLOADER_STATIC_REPORT "${RINGLOADER_STATIC_REPORT};${prefix} shared (no lib${lib}.a)" PARENT_SCOPE)
      return()
    endif()
    list(APPEND archives "${archive}")
  endforeach()
  if(NOT archives)
    return()
  endif()

  string(SHA1 key "${archives}")
  if(NOT DEFINED RINGLOADER_PIC_${prefix}_${key})
    set(dir "${CMAKE_BINARY_DIR}/CMakeFiles/ringloader-pic-check")
    file(WRITE "${dir}/empty.cc" "int ringloader_pic_check() { return 0; }\n")
    execute_process(
      COMMAND "${CMAKE_CXX_COMPILER}" -shared -fPIC "${dir}/empty.cc" -o "${dir}/${prefix}.so"
              -Wl,--exclude-libs,ALL -Wl,--whole-archive ${archives} -Wl,--no-whole-archive
      RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
    if(rc EQUAL 0)
      set(pic ON)
    else()
      set(pic OFF)
    endif()
    set(RINGLOADER_PIC_${prefix}_${key} ${pic} CACHE INTERNAL "archives of ${prefix} are position-independent")
  endif()
  if(NOT RINGLOADER_PIC_${prefix}_${key})
    set(RINGLOADER_STATIC_REPORT "${RINGLOADER_STATIC_REPORT};${prefix} shared (archives not position-independent)"
        PARENT_SCOPE)
    return()
  endif()

  set(names "")
  foreach(archive IN LISTS archives)
    get_filename_component(name "${archive}" NAME)
    list(APPEND names "${name}")
  endforeach()
  list(JOIN names ":" exclude)
  list(TRANSFORM system_libs PREPEND "-l")
  set_target_properties(PkgConfig::${prefix} PROPERTIES
    INTERFACE_LINK_LIBRARIES "${archives};${system_libs}"
    INTERFACE_LINK_OPTIONS "LINKER:--exclude-libs,${exclude}")
  set(RINGLOADER_STATIC_REPORT "${RINGLOADER_STATIC_REPORT};${prefix} static" PARENT_SCOPE)
endfunction()

macro(ringloader_find_pkg prefix)
  set(_rl_modules ${ARGN})  # a macro's ARGN is no variable: copy it to test for OPTIONAL
  set(_rl_optional OFF)
  if("OPTIONAL" IN_LIST _rl_modules)
    set(_rl_optional ON)
    list(REMOVE_ITEM _rl_modules OPTIONAL)
  endif()
  if(NOT PKG_CONFIG_FOUND)
    ringloader_require(OFF "pkg-config" "pkg-config" "pkgconf-pkg-config")
  else()
    pkg_check_modules(${prefix} QUIET IMPORTED_TARGET ${_rl_modules})
  endif()
  if(${prefix}_FOUND AND RINGLOADER_STATIC_DEPS)
    _ringloader_link_static(${prefix})
  elseif(NOT ${prefix}_FOUND AND NOT _rl_optional)
    foreach(_rl_module IN LISTS _rl_modules)
      set(_rl_one_FOUND OFF)
      if(PKG_CONFIG_FOUND)
        pkg_check_modules(_rl_one QUIET ${_rl_module})
      endif()
      if(NOT _rl_one_FOUND)
        string(REGEX REPLACE "[<>=].*" "" _rl_name "${_rl_module}")  # libtiff-4>=4.5 -> libtiff-4
        if(DEFINED ringloader_pkg_${_rl_name})
          string(REPLACE "|" ";" _rl_packages "${ringloader_pkg_${_rl_name}}")
        else()
          set(_rl_packages "the one with ${_rl_name}.pc" "the one with ${_rl_name}.pc")
        endif()
        list(GET _rl_packages 0 _rl_debian)
        list(GET _rl_packages 1 _rl_fedora)
        ringloader_require(OFF "${_rl_module}" "${_rl_debian}" "${_rl_fedora}")
      endif()
    endforeach()
  endif()
endmacro()
