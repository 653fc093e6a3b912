# ctest script: installs the current build into a scratch prefix, builds
# examples/embed_worker (LibTorch + hps::Worker) against it, then runs the
# installed `hpsearch run space.json --workers 0 --bind ipc://...` with the
# example serving its trials, and checks that both end well.
#
# Variables (-D): HPSEARCH_BUILD_DIR, HPSEARCH_SOURCE_DIR, WORK_DIR (emptied
# first), CXX_COMPILER, BUILD_TYPE, GENERATOR.
cmake_minimum_required(VERSION 3.25)

foreach(var HPSEARCH_BUILD_DIR HPSEARCH_SOURCE_DIR WORK_DIR CXX_COMPILER BUILD_TYPE GENERATOR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "embed_worker_example.cmake: -D${var}=... is required")
  endif()
endforeach()

set(prefix ${WORK_DIR}/prefix)
set(build ${WORK_DIR}/build)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

function(run_step what)
  message(STATUS "embed_worker example: ${what}: ${ARGN}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "embed_worker example: ${what} failed (${rc})")
  endif()
endfunction()

run_step(install ${CMAKE_COMMAND} --install ${HPSEARCH_BUILD_DIR} --prefix ${prefix})
run_step(configure ${CMAKE_COMMAND} -S ${HPSEARCH_SOURCE_DIR}/examples/embed_worker -B ${build}
  -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_BUILD_TYPE=${BUILD_TYPE}
  -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
run_step(build ${CMAKE_COMMAND} --build ${build})

# The coordinator in the background, the worker in the foreground; each
# exit status is checked, and the coordinator's output shown on failure.
set(endpoint ipc://${WORK_DIR}/coordinator.sock)
set(script "
  '${prefix}/bin/hpsearch' run '${HPSEARCH_SOURCE_DIR}/examples/embed_worker/space.json' \\
      --workers 0 --bind '${endpoint}' --n-trials 2 --storage '${WORK_DIR}/study.db' \\
      > '${WORK_DIR}/coordinator.out' 2>&1 &
  coordinator=$!
  '${build}/embed_worker' '${endpoint}' --epochs 2 --device cpu
  worker=$?
  wait $coordinator
  status=$?
  cat '${WORK_DIR}/coordinator.out'
  echo \"worker exit $worker, coordinator exit $status\"
  [ $worker -eq 0 ] && [ $status -eq 0 ] && grep -q '2 COMPLETE' '${WORK_DIR}/coordinator.out'
")
run_step("serve a coordinator" sh -c "${script}")
