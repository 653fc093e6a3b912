# hpsearch_gtest_groups(TARGET [FILTER f] [PER_GROUP n] [TIMEOUT s]
#                       [DISCOVERY_TIMEOUT s] [LABELS l...])
#
# Registers the GoogleTest tests of executable TARGET with CTest in groups:
# one CTest test per test suite, a suite of more than PER_GROUP tests
# (default 12) split into parts of at most that many ("CliTest.1of9",
# ..., a suite that fits in one group keeps its own name, "PrintableTest").
# Each group runs its tests by name (--gtest_filter=Suite.a:Suite.b) in one
# process of TARGET.
#
# Why not gtest_discover_tests (one process per test): under the sanitizers
# starting the test executable costs about 0.5 s of CPU (a 300 MB binary:
# mapping, relocation, the sanitizer runtime's set-up), about 1,100 times in
# the asan suite: four to five minutes of the test command on two cores
# for starting processes. Groups start about 150.
#
# The tests are listed after each build of TARGET (a POST_BUILD step, as
# gtest_discover_tests' default), with --gtest_filter=FILTER (default "*"):
# only the tests it selects are grouped; tests named DISABLED_ are left
# out, as GoogleTest leaves them out of a run. A test that fails shows in
# its group's output (ctest --output-on-failure) by its GoogleTest name;
# run one test alone with the executable: `TARGET --gtest_filter=Suite.test`.
# TIMEOUT (seconds, default 1500) is per group; LABELS are set on every
# group.
function(hpsearch_gtest_groups target)
  cmake_parse_arguments(ARG "" "FILTER;PER_GROUP;TIMEOUT;DISCOVERY_TIMEOUT" "LABELS" ${ARGN})
  if(NOT ARG_FILTER)
    set(ARG_FILTER "*")
  endif()
  if(NOT ARG_PER_GROUP)
    set(ARG_PER_GROUP 12)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 1500)
  endif()
  if(NOT ARG_DISCOVERY_TIMEOUT)
    set(ARG_DISCOVERY_TIMEOUT 120)
  endif()
  set(ctest_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_groups.cmake")
  set(ctest_include "${CMAKE_CURRENT_BINARY_DIR}/${target}_groups_include.cmake")
  list(JOIN ARG_LABELS "," labels)
  add_custom_command(TARGET ${target} POST_BUILD
    BYPRODUCTS "${ctest_file}"
    COMMAND "${CMAKE_COMMAND}"
      "-DTEST_EXECUTABLE=$<TARGET_FILE:${target}>"
      "-DTEST_FILTER=${ARG_FILTER}"
      "-DPER_GROUP=${ARG_PER_GROUP}"
      "-DTIMEOUT=${ARG_TIMEOUT}"
      "-DDISCOVERY_TIMEOUT=${ARG_DISCOVERY_TIMEOUT}"
      "-DLABELS=${labels}"
      "-DWORKING_DIR=${CMAKE_CURRENT_BINARY_DIR}"
      "-DCTEST_FILE=${ctest_file}"
      -P "${PROJECT_SOURCE_DIR}/cmake/GTestGroupsDiscover.cmake"
    VERBATIM)
  file(WRITE "${ctest_include}"
    "if(EXISTS \"${ctest_file}\")\n"
    "  include(\"${ctest_file}\")\n"
    "else()\n"
    "  add_test(${target}_NOT_BUILT ${target}_NOT_BUILT)\n"
    "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${ctest_include}")
endfunction()
