# ctest script: installs the current build into a scratch prefix, then
# configures, builds and runs examples/embed against that installed package,
# as a user of find_package(hpsearch) would. Variables: see
# install_and_build_example.cmake.
cmake_minimum_required(VERSION 3.25)

set(EXAMPLE embed)
include(${CMAKE_CURRENT_LIST_DIR}/install_and_build_example.cmake)
run_step(run ${build}/embed)
run_step("run with a SQLite store" ${build}/embed ${WORK_DIR}/embed.db)
