# Small helpers shared by the build files.

# hm_plugin_option(VAR help): a tri-state AUTO|ON|OFF cache option.
function(hm_plugin_option var help)
  set(${var} AUTO CACHE STRING "${help}: AUTO|ON|OFF")
  set_property(CACHE ${var} PROPERTY STRINGS AUTO ON OFF)
endfunction()

# hm_find_plugin_lib(VAR pkgconfig-module link-name plugin-dir): sets ${VAR}_FOUND and an
# imported target hm::${VAR} when the library is wanted and present; fails the
# configuration when the option is ON and the library is missing.
function(hm_find_plugin_lib var module lib dir)
  set(${var}_FOUND OFF PARENT_SCOPE)
  if(${var} STREQUAL "OFF")
    return()
  endif()
  if(NOT EXISTS ${PROJECT_SOURCE_DIR}/src/na/${dir}/CMakeLists.txt)
    if(${var} STREQUAL "ON")
      message(FATAL_ERROR "${var}=ON but src/na/${dir} is not in this tree")
    endif()
    return()
  endif()
  pkg_check_modules(${var}_PC QUIET IMPORTED_TARGET ${module})
  if(${var}_PC_FOUND)
    add_library(hm::${var} ALIAS PkgConfig::${var}_PC)
    set(${var}_FOUND ON PARENT_SCOPE)
    return()
  endif()
  find_library(${var}_LIB ${lib})
  if(${var}_LIB)
    add_library(hm_${var}_lib INTERFACE IMPORTED GLOBAL)
    target_link_libraries(hm_${var}_lib INTERFACE ${${var}_LIB})
    add_library(hm::${var} ALIAS hm_${var}_lib)
    set(${var}_FOUND ON PARENT_SCOPE)
    return()
  endif()
  if(${var} STREQUAL "ON")
    message(FATAL_ERROR "${var}=ON but ${module} was not found")
  endif()
  message(STATUS "${var}: ${module} not found, plugin not built")
endfunction()

# hm_add_test(NAME name SOURCES ... LABELS ... [ARGS ...] [TIMEOUT s] [LIBS ...]
#             [LINK lib])
# One executable, one CTest. Tests link the static testing library, which
# exposes internals; LINK replaces it with a narrower one (e.g. LINK hm_util,
# a layer's object library) so a layer's tests build without the layers above.
function(hm_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT;TARGET;LINK" "SOURCES;LABELS;ARGS;LIBS" ${ARGN})
  if(NOT T_TARGET)
    set(T_TARGET ${T_NAME})
  endif()
  if(NOT T_LINK)
    set(T_LINK hermod_testing)
  endif()
  if(NOT TARGET ${T_TARGET})
    add_executable(${T_TARGET} ${T_SOURCES})
    target_link_libraries(${T_TARGET} PRIVATE ${T_LINK} ${T_LIBS})
    target_compile_options(${T_TARGET} PRIVATE ${HM_WARN_FLAGS})
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  add_test(NAME ${T_NAME} COMMAND ${T_TARGET} ${T_ARGS})
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
    ENVIRONMENT "${HM_TEST_ENV}")
endfunction()

# hm_protocol_name(OUT uri): "ucx+tcp://127.0.0.1:0" -> "ucx+tcp", for test names.
function(hm_protocol_name out uri)
  string(REGEX REPLACE "://.*$" "" name "${uri}")
  set(${out} ${name} PARENT_SCOPE)
endfunction()
