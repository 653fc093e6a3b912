# Run by hpsearch_gtest_groups (cmake/GTestGroups.cmake) after each build of
# a test executable: lists its tests and writes CTEST_FILE, which adds one
# CTest test per group. Variables: TEST_EXECUTABLE, TEST_FILTER, PER_GROUP,
# TIMEOUT, DISCOVERY_TIMEOUT, LABELS (comma separated), WORKING_DIR,
# CTEST_FILE.
execute_process(
  COMMAND "${TEST_EXECUTABLE}" --gtest_list_tests "--gtest_filter=${TEST_FILTER}"
  WORKING_DIRECTORY "${WORKING_DIR}"
  TIMEOUT ${DISCOVERY_TIMEOUT}
  OUTPUT_VARIABLE listing
  ERROR_VARIABLE listing_err
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "listing the tests of ${TEST_EXECUTABLE} failed (${rc}):\n${listing}\n${listing_err}")
endif()

# --gtest_list_tests writes "Suite." (a parameterized or typed one with
# "  # GetParam() = ..." or "  # TypeParam = ...") then "  test" per test.
# The comments go first (a GetParam() value may hold ';', '[' or ']', which
# CMake's lists would read).
string(REGEX REPLACE " *#[^\n]*" "" listing "${listing}")
string(REGEX REPLACE "[][;]" "" listing "${listing}")
string(REPLACE "\n" ";" lines "${listing}")
set(suites "")
set(suite "")
foreach(line IN LISTS lines)
  if(line MATCHES "^([^ ].*)\\.$")
    set(suite "${CMAKE_MATCH_1}")
    list(APPEND suites "${suite}")
    set("tests_${suite}" "")
  elseif(line MATCHES "^  ([^ ]+)$" AND NOT suite STREQUAL "")
    set(test "${CMAKE_MATCH_1}")
    if(NOT test MATCHES "^DISABLED_" AND NOT suite MATCHES "(^|/)DISABLED_")
      list(APPEND "tests_${suite}" "${suite}.${test}")
    endif()
  endif()
endforeach()

set(out "# Written by cmake/GTestGroupsDiscover.cmake from ${TEST_EXECUTABLE}\n")
set(n_groups 0)
set(n_tests 0)
foreach(suite IN LISTS suites)
  set(names ${tests_${suite}})
  list(LENGTH names n)
  if(n EQUAL 0)
    continue()
  endif()
  math(EXPR parts "(${n} + ${PER_GROUP} - 1) / ${PER_GROUP}")
  # Spread evenly: parts of ceil(n / parts) or one fewer.
  math(EXPR per "(${n} + ${parts} - 1) / ${parts}")
  set(start 0)
  foreach(part RANGE 1 ${parts})
    math(EXPR left "${n} - ${start}")
    if(left LESS per)
      set(take ${left})
    else()
      set(take ${per})
    endif()
    list(SUBLIST names ${start} ${take} group)
    math(EXPR start "${start} + ${take}")
    math(EXPR n_tests "${n_tests} + ${take}")
    list(JOIN group ":" filter)
    if(parts EQUAL 1)
      set(name "${suite}")
    else()
      set(name "${suite}.${part}of${parts}")
    endif()
    string(APPEND out
      "add_test([==[${name}]==] [==[${TEST_EXECUTABLE}]==] [==[--gtest_filter=${filter}]==])\n"
      "set_tests_properties([==[${name}]==] PROPERTIES WORKING_DIRECTORY [==[${WORKING_DIR}]==]"
      " TIMEOUT ${TIMEOUT}")
    if(NOT LABELS STREQUAL "")
      string(REPLACE "," ";" label_list "${LABELS}")
      string(APPEND out " LABELS [==[${label_list}]==]")
    endif()
    string(APPEND out ")\n")
    math(EXPR n_groups "${n_groups} + 1")
  endforeach()
endforeach()
if(n_tests EQUAL 0)
  message(FATAL_ERROR "${TEST_EXECUTABLE}: no test matches --gtest_filter=${TEST_FILTER}")
endif()
file(WRITE "${CTEST_FILE}" "${out}")
