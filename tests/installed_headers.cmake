# ctest script: installs the current build into a scratch prefix and checks
# the installed headers, as a user of find_package(hpsearch) sees them:
#   1. every quoted #include of an installed header names an installed
#      header (no private header leaks through a public one);
#   2. no installed header includes a private dependency (ZeroMQ, SQLite,
#      cereal, spdlog, fmt, CLI11, zlib, LibTorch);
#   3. every installed header compiles on its own (twice in one translation
#      unit: include guards) against the installed package, with a folder of
#      stand-ins for the private dependencies' headers first on the include
#      path, each an #error (the real ones sit in /usr/include, which cannot
#      be taken off the path).
#
# Variables (-D): HPSEARCH_BUILD_DIR (the build to install), HPSEARCH_SOURCE_DIR,
# WORK_DIR (scratch folder, emptied first), CXX_COMPILER, BUILD_TYPE, GENERATOR.
cmake_minimum_required(VERSION 3.25)

foreach(var HPSEARCH_BUILD_DIR HPSEARCH_SOURCE_DIR WORK_DIR CXX_COMPILER BUILD_TYPE GENERATOR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "installed headers: -D${var}=... is required")
  endif()
endforeach()

set(prefix ${WORK_DIR}/prefix)
set(root ${prefix}/include/hpsearch)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

execute_process(COMMAND ${CMAKE_COMMAND} --install ${HPSEARCH_BUILD_DIR} --prefix ${prefix}
  RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "installed headers: install failed (${rc})")
endif()

file(GLOB_RECURSE headers RELATIVE ${root} ${root}/*.h ${root}/*.hpp)
list(LENGTH headers n_headers)
if(n_headers EQUAL 0)
  message(FATAL_ERROR "installed headers: none under ${root}")
endif()

# 1 and 2: the includes, read from the text.
set(private_deps "^(zmq\\.h|zmq\\.hpp|zmq_addon\\.hpp|sqlite3\\.h|zlib\\.h|cereal/|spdlog/|fmt/|CLI/|torch/|ATen/|c10/)")
set(problems "")
foreach(h ${headers})
  file(STRINGS ${root}/${h} lines REGEX "^[ \t]*#[ \t]*include")
  foreach(line ${lines})
    if(line MATCHES "#[ \t]*include[ \t]*\"([^\"]+)\"")
      if(NOT EXISTS ${root}/${CMAKE_MATCH_1})
        string(APPEND problems "  ${h} includes \"${CMAKE_MATCH_1}\", which is not installed\n")
      endif()
    elseif(line MATCHES "#[ \t]*include[ \t]*<([^>]+)>")
      set(included ${CMAKE_MATCH_1})
      if(included MATCHES "${private_deps}")
        string(APPEND problems "  ${h} includes <${included}>, a private dependency\n")
      endif()
    endif()
  endforeach()
endforeach()
if(problems)
  message(FATAL_ERROR "installed headers:\n${problems}")
endif()
message(STATUS "installed headers: ${n_headers} headers include only installed headers")

# 3: compile each on its own.
set(poison ${WORK_DIR}/private_deps)
foreach(dep zmq.h zmq.hpp zmq_addon.hpp sqlite3.h zlib.h cereal/cereal.hpp
    cereal/archives/binary.hpp cereal/archives/portable_binary.hpp cereal/types/string.hpp
    cereal/types/vector.hpp spdlog/spdlog.h spdlog/fmt/fmt.h fmt/format.h fmt/core.h
    CLI/CLI.hpp torch/torch.h)
  file(WRITE ${poison}/${dep}
    "#error \"an installed hpsearch header includes <${dep}>, a private dependency\"\n")
endforeach()
execute_process(COMMAND ${CMAKE_COMMAND}
    -S ${HPSEARCH_SOURCE_DIR}/tests/installed_headers -B ${WORK_DIR}/build
    -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_BUILD_TYPE=${BUILD_TYPE}
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
    -DHEADER_ROOT=${root} -DPRIVATE_DEPS_DIR=${poison}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "installed headers: configure failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build --parallel 2 RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "installed headers: a header does not compile on its own (${rc})")
endif()
message(STATUS "installed headers: each of the ${n_headers} compiles on its own")
