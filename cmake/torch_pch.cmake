# Precompiled <torch/torch.h> (KOLO_TORCH_PCH, on by default) for every target that uses
# libtorch. Parsing libtorch's headers is most of the compile time of a file that
# includes them, and a clean Release build has 45 such files (12 in each sanitizer
# build). Measured (CPU seconds per file, 2-core Xeon shared with other builds; docs/ci.md
# has the table): Release -O3 about 22 -> 13, ASan -O1 about 30 -> 12.5; compiling the
# header itself costs 38 s (Release) and 46 s (ASan), twice per build (see below).
# Loading the 600 MB precompiled header costs a file some 5.5 s, so a file that does not
# include libtorch (there is one: src/train/keras/progbar_format.cc) pays that for nothing;
# set_source_files_properties(<file> PROPERTIES SKIP_PRECOMPILE_HEADERS ON) spares one.
#
# kolo_torch_pch() is called once, at the end of the top-level CMakeLists.txt, when every
# target exists: it gives each target that links kolo_torch (directly, or through another
# kolo library such as kolo_train) the header compiled once, instead of each of its files
# parsing it. A new target that links libtorch through kolo_torch gets it with no line of
# its own. Two copies are compiled, because GCC refuses a precompiled header built with
# other -fPIC/-fPIE settings (it then parses the header as if there were none: correct,
# only slow; CMake passes -Winvalid-pch, so the build says so):
#   kolo_torch's own, for the libraries (-fPIC);
#   kolo_torch_pch_exe's, an object library compiled as the executables are (-fPIE).
# Every flag that matters to GCC's check is the same in all of them: the compile options
# and definitions are set for the whole tree (top-level CMakeLists.txt, libtorch's
# definitions through kolo_torch), also in the sanitizer builds. (-O0 against -O1..3
# does matter, __OPTIMIZE__: a target with its own -O0 would warn and parse.)
#
# ccache (-DCMAKE_CXX_COMPILER_LAUNCHER=ccache) works, but it caches neither the header
# nor the files that use it unless its sloppiness allows it (ccache's manual: "Precompiled
# headers"); add pch_defines,time_macros to what `ccache --get-config sloppiness` says:
#   ccache --set-config sloppiness=pch_defines,time_macros
# Without that, ccache compiles those files every time ("could not use precompiled
# header" in `ccache -s -v`); everything else is cached as before. Configuring says so.
# -DKOLO_TORCH_PCH=OFF builds without precompiled headers (each file parses libtorch's
# headers itself, as its #includes say; a missing #include shows there and not here).
option(KOLO_TORCH_PCH "Compile <torch/torch.h> once per build for the targets that use libtorch" ON)

# The targets defined in `dir` and in its subdirectories.
function(_kolo_all_targets out dir)
  get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _kolo_all_targets(sub_targets "${sub}")
    list(APPEND targets ${sub_targets})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

# kolo_links_torch(<out> <target>): TRUE in <out> when <target> links kolo_torch, directly
# or through other targets of this project (kolo_train, ...). Used for the precompiled
# header below and by kolo_add_tests (one ctest entry per libtorch test program).
function(kolo_links_torch out target)
  set(queue ${target})
  set(seen)
  while(queue)
    list(POP_FRONT queue t)
    get_target_property(aliased ${t} ALIASED_TARGET)
    if(aliased)
      set(t ${aliased})
    endif()
    if(t IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${t})
    get_target_property(libs ${t} LINK_LIBRARIES)
    if(NOT libs)
      continue()
    endif()
    foreach(lib IN LISTS libs)
      if(lib STREQUAL "kolo_torch")
        set(${out} TRUE PARENT_SCOPE)
        return()
      endif()
      if(TARGET "${lib}")
        get_target_property(imported "${lib}" IMPORTED)
        if(NOT imported)
          list(APPEND queue "${lib}")
        endif()
      endif()
    endforeach()
  endwhile()
  set(${out} FALSE PARENT_SCOPE)
endfunction()

function(kolo_torch_pch)
  if(NOT KOLO_TORCH_PCH OR NOT TARGET kolo_torch)
    return()
  endif()
  if(CMAKE_CXX_COMPILER_LAUNCHER MATCHES "ccache")
    execute_process(COMMAND ccache --get-config sloppiness OUTPUT_VARIABLE sloppiness
                    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(NOT sloppiness MATCHES "pch_defines" OR NOT sloppiness MATCHES "time_macros")
      message(STATUS "ccache will not cache the files that use the precompiled <torch/torch.h> "
                     "(its sloppiness is \"${sloppiness}\"): add pch_defines,time_macros, e.g. "
                     "ccache --set-config sloppiness=pch_defines,time_macros")
    endif()
  endif()
  target_precompile_headers(kolo_torch PRIVATE <torch/torch.h>)
  # The executables' copy: an object library with nothing else in it, compiled with the
  # executables' flags (-fPIE) and linked to kolo_torch for libtorch's definitions.
  set(empty "${PROJECT_BINARY_DIR}/kolo_torch_pch_exe.cc")
  if(NOT EXISTS "${empty}")
    file(WRITE "${empty}" "// Compiles the executables' precompiled <torch/torch.h> (cmake/torch_pch.cmake).\n")
  endif()
  add_library(kolo_torch_pch_exe OBJECT "${empty}")
  # (Its one file, empty, uses the header, as CMake needs: that costs some 6 s of CPU,
  # what loading the 600 MB precompiled header costs every file that uses it.)
  set_target_properties(kolo_torch_pch_exe PROPERTIES POSITION_INDEPENDENT_CODE OFF)
  target_compile_options(kolo_torch_pch_exe PRIVATE ${CMAKE_CXX_COMPILE_OPTIONS_PIE})
  target_link_libraries(kolo_torch_pch_exe PRIVATE kolo_torch)
  target_precompile_headers(kolo_torch_pch_exe PRIVATE <torch/torch.h>)

  _kolo_all_targets(targets "${PROJECT_SOURCE_DIR}")
  foreach(target IN LISTS targets)
    if(target STREQUAL "kolo_torch" OR target STREQUAL "kolo_torch_pch_exe")
      continue()
    endif()
    get_target_property(type ${target} TYPE)
    get_target_property(pic ${target} POSITION_INDEPENDENT_CODE)
    if(NOT type MATCHES "^(EXECUTABLE|STATIC_LIBRARY|SHARED_LIBRARY|MODULE_LIBRARY|OBJECT_LIBRARY)$"
       OR NOT pic)
      continue()  # (every kolo target is position-independent: CMAKE_POSITION_INDEPENDENT_CODE)
    endif()
    get_target_property(own ${target} PRECOMPILE_HEADERS)
    get_target_property(reused ${target} PRECOMPILE_HEADERS_REUSE_FROM)
    if(own OR reused)
      continue()  # a target with precompiled headers of its own keeps them
    endif()
    kolo_links_torch(uses_torch ${target})
    if(NOT uses_torch)
      continue()
    endif()
    if(type STREQUAL "EXECUTABLE")
      target_precompile_headers(${target} REUSE_FROM kolo_torch_pch_exe)
    else()
      target_precompile_headers(${target} REUSE_FROM kolo_torch)
    endif()
  endforeach()
endfunction()
