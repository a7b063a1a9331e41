# Installation, the CMake package and the Debian package (docs/packaging.md).
#
#   cmake --install build --prefix P   headers, static libraries, kolorun, P/lib/cmake/kolo
#   cd build && cpack -G DEB           kolo_<version>_<arch>.deb (installs under /usr)
#
# Not for: how the libraries are built (src/*/CMakeLists.txt). Included by the top-level
# CMakeLists.txt after every library target exists.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(KOLO_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kolo)
# The names users write: kolo::kolo and kolo::torch. Internal archives keep their names
# (kolo::kolo_common, ...): users never name them, kolo::kolo's interface does.
set_target_properties(kolo PROPERTIES EXPORT_NAME kolo)

# Every archive below kolo::kolo: they are static, so the program links each of them.
set(kolo_internal_libraries kolo_common kolo_startup kolo_rendezvous kolo_transport
                            kolo_transport_shm kolo_transport_hier kolo_transports kolo_device
                            kolo_core)
list(APPEND kolo_internal_libraries kolo_device_default)
if(KOLO_DEVICE_PATH)
  # Its users need the CUDA toolkit and NCCL where this build found them (koloConfig.cmake).
  list(APPEND kolo_internal_libraries kolo_device_cuda)
  set(KOLO_PACKAGE_WITH_CUDA TRUE)
else()
  set(KOLO_PACKAGE_WITH_CUDA FALSE)
endif()
if(TARGET kolo_transport_mpi)
  list(APPEND kolo_internal_libraries kolo_transport_mpi)
endif()
if(TARGET kolo_transport_gloo)
  list(APPEND kolo_internal_libraries kolo_transport_gloo)
endif()
install(TARGETS ${kolo_internal_libraries} kolo kolorun
        EXPORT koloTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
set(KOLO_INSTALLED_LIBRARIES ${kolo_internal_libraries} kolo)  # for tests/packaging
install(EXPORT koloTargets NAMESPACE kolo:: DESTINATION ${KOLO_CMAKE_INSTALL_DIR})

set(kolo_header_excludes)
if(TARGET kolo_torch)
  set_target_properties(kolo_torch PROPERTIES EXPORT_NAME torch)
  # A separate export set, so that find_package(kolo COMPONENTS kolo) needs no libtorch.
  install(TARGETS kolo_torch EXPORT koloTorchTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  list(APPEND KOLO_INSTALLED_LIBRARIES kolo_torch)
  # kolo::train (kolo/train.h: strategies, Model and fit) sits on kolo::torch: same set.
  if(TARGET kolo_train)
    set_target_properties(kolo_train PROPERTIES EXPORT_NAME train)
    install(TARGETS kolo_ps kolo_train EXPORT koloTorchTargets
            ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
    list(APPEND KOLO_INSTALLED_LIBRARIES kolo_ps kolo_train)
  else()
    set(kolo_header_excludes PATTERN train.h EXCLUDE PATTERN train EXCLUDE)
  endif()
  install(EXPORT koloTorchTargets NAMESPACE kolo:: DESTINATION ${KOLO_CMAKE_INSTALL_DIR})
  set(KOLO_PACKAGE_WITH_TORCH TRUE)
  if(TARGET kolo_train)
    set(KOLO_PACKAGE_WITH_TRAIN TRUE)
  else()
    set(KOLO_PACKAGE_WITH_TRAIN FALSE)
  endif()
else()
  set(kolo_header_excludes PATTERN torch.h EXCLUDE PATTERN train.h EXCLUDE PATTERN train EXCLUDE)
  set(KOLO_PACKAGE_WITH_TORCH FALSE)
  set(KOLO_PACKAGE_WITH_TRAIN FALSE)
endif()
if(TARGET kolo_transport_gloo)
  set(KOLO_PACKAGE_WITH_GLOO TRUE)
else()
  set(KOLO_PACKAGE_WITH_GLOO FALSE)
endif()
if(TARGET kolo_transport_mpi)
  set(KOLO_PACKAGE_WITH_MPI TRUE)
else()
  set(KOLO_PACKAGE_WITH_MPI FALSE)
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/kolo DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        ${kolo_header_excludes})

# libtorch fixes the C++ string ABI of everything kolo compiled (top-level CMakeLists.txt);
# a program that includes only kolo/kolo.h must use the same, so kolo::kolo says it, as
# the same compile option libtorch's target gives (CMake then passes it once).
foreach(flag IN LISTS kolo_torch_cxx_flags)
  if(flag MATCHES "^-D_GLIBCXX_USE_CXX11_ABI=[01]$")
    target_compile_options(kolo INTERFACE $<INSTALL_INTERFACE:${flag}>)
  endif()
endforeach()
# The public headers are C++20 (kolo/train.h's defaulted comparisons, designated
# initializers): every public target asks for it, so a program at its compiler's default
# standard builds.
foreach(public IN ITEMS kolo kolo_torch kolo_train)
  if(TARGET ${public})
    target_compile_features(${public} INTERFACE cxx_std_20)
  endif()
endforeach()

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/koloConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/koloConfig.cmake
                              INSTALL_DESTINATION ${KOLO_CMAKE_INSTALL_DIR})
# 0.x: a minor version may change the API, so only the same 0.MINOR is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/koloConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/koloConfig.cmake ${PROJECT_BINARY_DIR}/koloConfigVersion.cmake
        DESTINATION ${KOLO_CMAKE_INSTALL_DIR})

# The Debian package: everything above under /usr. Its dependencies are what a program
# built against it needs on Debian 12: the compiler is the user's own; MPI's headers and
# libmpi (find_dependency(MPI)) and mpirun (kolorun starts workers through it); Gloo's
# CMake package and library (find_dependency(Gloo)); libtorch's CMake package and
# libraries (kolo::torch); zlib (libkolo_torch.a); libzmq (libkolo_ps.a, kolo::train).
# kolorun's own shared
# libraries (libc, libstdc++) come from dpkg-shlibdeps.
set(CPACK_PACKAGE_NAME kolo)
set(CPACK_PACKAGE_VENDOR "kolo")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "data-parallel training for C++ libtorch programs: library, CMake package and kolorun")
set(CPACK_PACKAGE_CONTACT "kolo developers <kolo@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(KOLO_DEB_DEPENDS)  # also read by tests/packaging
if(KOLO_PACKAGE_WITH_MPI)
  list(APPEND KOLO_DEB_DEPENDS libopenmpi-dev openmpi-bin)
endif()
if(KOLO_PACKAGE_WITH_GLOO)
  list(APPEND KOLO_DEB_DEPENDS libgloo-dev)
endif()
if(KOLO_PACKAGE_WITH_TORCH)
  list(APPEND KOLO_DEB_DEPENDS libtorch-dev zlib1g-dev)
endif()
if(KOLO_PACKAGE_WITH_TRAIN)
  list(APPEND KOLO_DEB_DEPENDS libzmq3-dev)
endif()
list(JOIN KOLO_DEB_DEPENDS ", " CPACK_DEBIAN_PACKAGE_DEPENDS)
set(CPACK_PACKAGE_DESCRIPTION "kolo::kolo, kolo::torch and kolo::train for \
find_package(kolo CONFIG REQUIRED), the public headers (kolo/kolo.h, kolo/elastic.h, \
kolo/torch.h, kolo/train.h, kolo/train/) and the kolorun launcher.")
# Building a program against kolo takes a C++20 compiler and CMake; not required, since
# the user may bring their own.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "cmake, g++")
set(CPACK_GENERATOR DEB)
include(CPack)
