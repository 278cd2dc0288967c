# One helper per kind of target.

# dar_library(NAME SRCS ... DEPS ...): a static library rooted at src/.
function(dar_library name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SRCS})
  target_include_directories(${name} PUBLIC ${CMAKE_SOURCE_DIR}/src)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
endfunction()

# dar_test(NAME SRCS ... DEPS ... [LABELS ...] [RUN_SERIAL]): one GoogleTest binary, registered
# with ctest. Tests run with the repository root as working directory so they find scenarios/
# and data/. LABELS defaults to `unit` (run again under ASan + UBSan by `make test`);
# `integration` tests (real processes, namespaces) run once, in the Release build. RUN_SERIAL:
# ctest runs them alone (their timing is what they exercise: a failover within the agents'
# staleness timeout, which another test on the same two cores would stretch).
function(dar_test name)
  cmake_parse_arguments(ARG "RUN_SERIAL" "" "SRCS;DEPS;LABELS" ${ARGN})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  add_executable(${name} ${ARG_SRCS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} dar_test_support GTest::gtest GTest::gmock
                                        GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE DAR_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
                                             DAR_BINARY_DIR="${CMAKE_BINARY_DIR}")
  include(GoogleTest)
  set(serial FALSE)
  if(ARG_RUN_SERIAL)
    set(serial TRUE)
  endif()
  gtest_discover_tests(${name} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR} DISCOVERY_TIMEOUT 60
                       PROPERTIES TIMEOUT 900 LABELS "${ARG_LABELS}" RUN_SERIAL ${serial})
  if("unit" IN_LIST ARG_LABELS)
    set_property(GLOBAL APPEND PROPERTY DAR_UNIT_TESTS ${name})
  endif()
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

# dar_proto_library(NAME PROTOS ...): messages and gRPC stubs from .proto files under proto/,
# generated into the build tree (include them as "dar/v1/foo.pb.h").
function(dar_proto_library name)
  cmake_parse_arguments(ARG "" "" "PROTOS" ${ARGN})
  set(gen_dir ${CMAKE_BINARY_DIR}/proto)
  set(srcs)
  foreach(proto ${ARG_PROTOS})
    get_filename_component(abs ${proto} ABSOLUTE)
    file(RELATIVE_PATH rel ${CMAKE_SOURCE_DIR}/proto ${abs})
    string(REGEX REPLACE "\\.proto$" "" base ${rel})
    set(out ${gen_dir}/${base})
    list(APPEND srcs ${out}.pb.cc ${out}.grpc.pb.cc)
    add_custom_command(
      OUTPUT ${out}.pb.cc ${out}.pb.h ${out}.grpc.pb.cc ${out}.grpc.pb.h
      COMMAND ${CMAKE_COMMAND} -E make_directory ${gen_dir}
      COMMAND protobuf::protoc --cpp_out=${gen_dir} --grpc_out=${gen_dir}
              --plugin=protoc-gen-grpc=$<TARGET_FILE:gRPC::grpc_cpp_plugin>
              -I ${CMAKE_SOURCE_DIR}/proto ${abs}
      DEPENDS ${abs} VERBATIM)
  endforeach()
  add_library(${name} STATIC ${srcs})
  # protoc gives every generated file the same internal names: one compiler run per file.
  set_target_properties(${name} PROPERTIES UNITY_BUILD OFF)
  # Generated code is not ours to warn about.
  target_compile_options(${name} PRIVATE -w)
  target_include_directories(${name} SYSTEM PUBLIC ${gen_dir})
  target_link_libraries(${name} PUBLIC protobuf::libprotobuf gRPC::grpc++)
endfunction()
