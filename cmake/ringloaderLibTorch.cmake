# Locates LibTorch for the ringloader::torch adaptor and defines the imported target
# ringloader::libtorch. Used by ringloader's own build and by the installed package config.
#
# Order:
#   1. an existing `torch` target (the caller already ran find_package(Torch)): used as is;
#   2. a LibTorch tree found through Torch_DIR or CMAKE_PREFIX_PATH (for the torch wheel:
#      python -c 'import torch; print(torch.utils.cmake_prefix_path)'): its headers and its
#      CPU-side libraries (libtorch, libtorch_cpu, libc10) are used directly.
#
# Why not always find_package(Torch): TorchConfig of a CUDA build of torch (the default wheels)
# fails unless a matching CUDA toolkit is installed, even for code that only touches CPU
# tensors. The adaptor only wraps host memory, so the CPU libraries are all it needs.
include_guard(GLOBAL)

# Sets `out_var` to TRUE when ringloader::libtorch exists afterwards, FALSE otherwise;
# `reason_var` says why not.
function(ringloader_find_libtorch out_var reason_var)
  set(${out_var} FALSE PARENT_SCOPE)
  if(TARGET ringloader::libtorch)
    set(${out_var} TRUE PARENT_SCOPE)
    return()
  endif()
  if(TARGET torch)
    add_library(ringloader::libtorch INTERFACE IMPORTED)
    set_target_properties(ringloader::libtorch PROPERTIES INTERFACE_LINK_LIBRARIES torch)
    set(${out_var} TRUE PARENT_SCOPE)
    return()
  endif()

  set(hints "")
  if(Torch_DIR)
    list(APPEND hints "${Torch_DIR}")
  endif()
  if(DEFINED ENV{Torch_DIR})
    list(APPEND hints "$ENV{Torch_DIR}")
  endif()
  find_file(RINGLOADER_TORCH_CONFIG TorchConfig.cmake
    HINTS ${hints}
    PATH_SUFFIXES Torch share/cmake/Torch
    NO_CMAKE_SYSTEM_PATH)
  if(NOT RINGLOADER_TORCH_CONFIG)
    set(${reason_var} "no TorchConfig.cmake under Torch_DIR or CMAKE_PREFIX_PATH (for the torch wheel: torch.utils.cmake_prefix_path)"
        PARENT_SCOPE)
    return()
  endif()
  # <root>/share/cmake/Torch/TorchConfig.cmake
  get_filename_component(config_dir "${RINGLOADER_TORCH_CONFIG}" DIRECTORY)
  get_filename_component(root "${config_dir}/../../.." ABSOLUTE)

  file(READ "${RINGLOADER_TORCH_CONFIG}" config_text)
  if(config_text MATCHES "_GLIBCXX_USE_CXX11_ABI=0")
    # ringloader's API passes std::string; mixing the two libstdc++ ABIs would not link.
    set(${reason_var} "LibTorch at ${root} uses the pre-C++11 libstdc++ ABI" PARENT_SCOPE)
    return()
  endif()

  set(libs "")
  foreach(name torch torch_cpu c10)
    find_library(RINGLOADER_TORCH_LIB_${name} ${name} PATHS "${root}/lib" NO_DEFAULT_PATH)
    if(NOT RINGLOADER_TORCH_LIB_${name})
      set(${reason_var} "lib${name} not found in ${root}/lib" PARENT_SCOPE)
      return()
    endif()
    list(APPEND libs "${RINGLOADER_TORCH_LIB_${name}}")
  endforeach()
  if(NOT EXISTS "${root}/include/torch/csrc/api/include/torch/types.h")
    set(${reason_var} "LibTorch headers not found under ${root}/include" PARENT_SCOPE)
    return()
  endif()

  add_library(ringloader::libtorch INTERFACE IMPORTED)
  set_target_properties(ringloader::libtorch PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${root}/include;${root}/include/torch/csrc/api/include"
    INTERFACE_LINK_LIBRARIES "${libs}"
    # Consumers find libtorch next to the others at run time without LD_LIBRARY_PATH.
    INTERFACE_LINK_OPTIONS "LINKER:-rpath,${root}/lib")
  set(RINGLOADER_TORCH_ROOT "${root}" CACHE INTERNAL "LibTorch tree used by ringloader::libtorch")
  set(${out_var} TRUE PARENT_SCOPE)
endfunction()
