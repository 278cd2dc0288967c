# One helper per kind of target.

# dar_library(NAME SRCS ... DEPS ...): a static library rooted at src/.
function(dar_library name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SRCS})
  target_include_directories(${name} PUBLIC ${CMAKE_SOURCE_DIR}/src)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
endfunction()

# dar_test(NAME SRCS ... DEPS ...): one GoogleTest binary, registered with ctest.
# Tests run with the repository root as working directory so they find scenarios/ and data/.
function(dar_test name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE DAR_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
                                             DAR_BINARY_DIR="${CMAKE_BINARY_DIR}")
  include(GoogleTest)
  gtest_discover_tests(${name} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR} DISCOVERY_TIMEOUT 60
                       PROPERTIES TIMEOUT 900 LABELS unit)
endfunction()

# dar_binary(NAME SRCS ... DEPS ...): a command-line program; main() stays thin.
function(dar_binary name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
endfunction()

# dar_benchmark(NAME SRCS ... DEPS ...): a Google Benchmark binary, built with `make bench`.
function(dar_benchmark name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} benchmark::benchmark)
  target_compile_definitions(${name} PRIVATE DAR_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
endfunction()
