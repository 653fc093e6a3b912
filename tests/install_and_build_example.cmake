# Included by the ctest scripts that build an example against the installed
# package (embed_example.cmake, embed_worker_example.cmake), with EXAMPLE set
# to the folder under examples/: checks the -D variables, empties WORK_DIR,
# defines run_step(), installs the build into ${prefix} and configures and
# builds examples/${EXAMPLE} in ${build} against that prefix only.
#
# Variables (-D): HPSEARCH_BUILD_DIR (the build to install), HPSEARCH_SOURCE_DIR,
# WORK_DIR (scratch folder, emptied first), CXX_COMPILER, BUILD_TYPE, GENERATOR.
foreach(var HPSEARCH_BUILD_DIR HPSEARCH_SOURCE_DIR WORK_DIR CXX_COMPILER BUILD_TYPE GENERATOR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "${EXAMPLE} example: -D${var}=... is required")
  endif()
endforeach()

set(prefix ${WORK_DIR}/prefix)
set(build ${WORK_DIR}/build)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

function(run_step what)
  message(STATUS "${EXAMPLE} example: ${what}: ${ARGN}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${EXAMPLE} example: ${what} failed (${rc})")
  endif()
endfunction()

run_step(install ${CMAKE_COMMAND} --install ${HPSEARCH_BUILD_DIR} --prefix ${prefix})
# Only the scratch prefix: the package must bring everything it needs.
run_step(configure ${CMAKE_COMMAND} -S ${HPSEARCH_SOURCE_DIR}/examples/${EXAMPLE} -B ${build}
  -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_BUILD_TYPE=${BUILD_TYPE}
  -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
run_step(build ${CMAKE_COMMAND} --build ${build})
