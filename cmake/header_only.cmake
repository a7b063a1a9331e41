# kolo_header_only(<target> <header> [REQUIRED]): when <target> does not exist yet (its
# package was not found), looks for <header> on the include path (CMAKE_INCLUDE_PATH,
# CMAKE_PREFIX_PATH/include, the system's) and defines <target> as an interface library
# over the directory holding it. With REQUIRED, a missing header stops the configure.
function(kolo_header_only target header)
  if(TARGET ${target})
    return()
  endif()
  string(MAKE_C_IDENTIFIER "KOLO_INCLUDE_${header}" var)
  find_path(${var} ${header})
  if(${var})
    add_library(${target} INTERFACE IMPORTED GLOBAL)
    set_target_properties(${target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${${var}}")
  elseif("REQUIRED" IN_LIST ARGN)
    message(FATAL_ERROR "${header} not found: install its package (docs/dependencies.md) "
                        "or put its directory on CMAKE_INCLUDE_PATH")
  endif()
endfunction()
