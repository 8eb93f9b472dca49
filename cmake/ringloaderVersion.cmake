# The one version number is pyproject.toml's [project] version. scikit-build-core passes it as
# SKBUILD_PROJECT_VERSION_FULL; a plain CMake build reads it from pyproject.toml. Included before
# project(), which takes only the numeric part (0.1.0 of 0.1.0rc1).
#   RINGLOADER_VERSION          the full string (Python's __version__, ringloader-bench --version)
#   RINGLOADER_VERSION_NUMERIC  the numeric prefix, for project() and the CMake package version
if(DEFINED SKBUILD_PROJECT_VERSION_FULL)
  set(RINGLOADER_VERSION "${SKBUILD_PROJECT_VERSION_FULL}")
else()
  file(STRINGS "${CMAKE_CURRENT_LIST_DIR}/../pyproject.toml" ringloader_version_line
       REGEX "^version = \"[^\"]+\"" LIMIT_COUNT 1)
  if(NOT ringloader_version_line MATCHES "^version = \"([^\"]+)\"")
    message(FATAL_ERROR "ringloader: no `version = \"...\"` line in pyproject.toml")
  endif()
  set(RINGLOADER_VERSION "${CMAKE_MATCH_1}")
endif()
string(REGEX MATCH "^[0-9]+(\\.[0-9]+)*" RINGLOADER_VERSION_NUMERIC "${RINGLOADER_VERSION}")
