# ctest script: installs the current build into a scratch prefix, builds
# examples/embed_worker (LibTorch + hps::Worker) against it, then runs the
# installed `hpsearch run space.json --workers 0 --bind ipc://...` with the
# example serving its trials, and checks that both end well. Variables: see
# install_and_build_example.cmake.
cmake_minimum_required(VERSION 3.25)

set(EXAMPLE embed_worker)
include(${CMAKE_CURRENT_LIST_DIR}/install_and_build_example.cmake)

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
