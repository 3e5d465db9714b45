# Install rules, the exported CMake package and the pkg-config file.
#
# What a user gets after `cmake --install`:
#   lib/libhermod.so*             exported as the imported target hermod::hermod
#   lib/libhermod.a               plain archive; hermodConfig.cmake rebuilds
#                                 hermod::hermod_static for it (see below)
#   include/hermod.h, include/hermod/*.h (with the generated version.h)
#   lib/cmake/hermod/             hermodConfig.cmake, hermodConfigVersion.cmake,
#                                 hermodTargets*.cmake
#   lib/pkgconfig/hermod.pc       relocatable (prefix derived from ${pcfiledir})
#
# Design note: the libraries link their plugin libraries (ucp, fabric, ibverbs)
# PRIVATE through the build-tree targets hm::HM_NA_*. For the shared library
# that is invisible to users, so it is exported as is. Exporting the static
# archive the same way would write those build-tree targets into the export
# set (install(EXPORT) refuses, or the consumer meets undefined targets).
# Rejected: exporting them as well, which would freeze build-machine paths and
# pkg-config internals into hermodTargets.cmake. Chosen: the archive is
# installed plainly and hermodConfig.cmake declares hermod::hermod_static
# itself, with its link dependencies as plain -l names (the same ones
# hermod.pc lists for `pkg-config --static`).
include(CMakePackageConfigHelpers)

set(HM_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/hermod)

install(TARGETS hermod EXPORT hermodTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS hermod_static ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})

install(FILES ${PROJECT_SOURCE_DIR}/include/hermod.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/hermod/
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/hermod
  FILES_MATCHING PATTERN "*.h")
install(FILES ${PROJECT_BINARY_DIR}/include/hermod/version.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/hermod)

# The link dependencies of the static archive, two spellings:
#   HM_PC_REQUIRES_PRIVATE  pkg-config modules (ucx, libfabric, ...)
#   HM_PC_LIBS_PRIVATE      -l flags for plugins found without pkg-config
#   HM_STATIC_LINK_LIBS     plain library names for hermod::hermod_static
set(HM_PC_REQUIRES_PRIVATE "")
set(HM_PC_LIBS_PRIVATE "")
set(HM_STATIC_LINK_LIBS "")
foreach(p HM_NA_UCX HM_NA_OFI HM_NA_VERBS)
  if(NOT ${p}_FOUND)
    continue()
  endif()
  if(${p}_PC_FOUND)
    list(APPEND HM_PC_REQUIRES_PRIVATE ${${p}_PC_MODULE_NAME})
    list(APPEND HM_STATIC_LINK_LIBS ${${p}_PC_LIBRARIES})
  elseif(${p}_LIB)
    get_filename_component(libname ${${p}_LIB} NAME_WE)
    string(REGEX REPLACE "^lib" "" libname ${libname})
    string(APPEND HM_PC_LIBS_PRIVATE " -l${libname}")
    list(APPEND HM_STATIC_LINK_LIBS ${libname})
  endif()
endforeach()
# hwloc: contexts are placed on NUMA nodes by the core (src/topo).
list(APPEND HM_PC_REQUIRES_PRIVATE hwloc)
list(APPEND HM_STATIC_LINK_LIBS hwloc m)
# PMIx: groups of ranks started by mpirun/srun (src/group), when found.
if(TARGET PkgConfig::HM_GROUP_PMIX_PC)
  list(APPEND HM_PC_REQUIRES_PRIVATE pmix)
  list(APPEND HM_STATIC_LINK_LIBS pmix)
endif()
string(REPLACE ";" " " HM_PC_REQUIRES_PRIVATE "${HM_PC_REQUIRES_PRIVATE}")

# hermod.pc: relocatable, so `cmake --install --prefix X` works whatever
# CMAKE_INSTALL_PREFIX was at configure time.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(HM_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH rel "/hm_prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/hm_prefix")
  string(REGEX REPLACE "/$" "" rel "${rel}")
  set(HM_PC_PREFIX "\${pcfiledir}/${rel}")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/hermod.pc.in
  ${PROJECT_BINARY_DIR}/hermod.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/hermod.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

install(EXPORT hermodTargets NAMESPACE hermod::
  DESTINATION ${HM_INSTALL_CMAKEDIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/hermodConfig.cmake.in
  ${PROJECT_BINARY_DIR}/hermodConfig.cmake
  INSTALL_DESTINATION ${HM_INSTALL_CMAKEDIR}
  PATH_VARS CMAKE_INSTALL_LIBDIR CMAKE_INSTALL_INCLUDEDIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/hermodConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/hermodConfig.cmake
  ${PROJECT_BINARY_DIR}/hermodConfigVersion.cmake
  DESTINATION ${HM_INSTALL_CMAKEDIR})
