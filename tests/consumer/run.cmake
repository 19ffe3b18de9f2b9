# Installs distop from BUILD_DIR into a scratch prefix, builds tests/consumer against it with
# find_package(distop), and runs its programs under MPI (consumer, and watched, which links
# distop::watchdog too). Invoked by CTest with -D variables.
file(REMOVE_RECURSE "${WORK_DIR}")
execute_process(COMMAND ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix"
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "install failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK_DIR}/build"
                        -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring the consumer failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build "${WORK_DIR}/build" RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the consumer failed: ${rc}")
endif()
execute_process(COMMAND ${MPIEXEC} -n 2 "${WORK_DIR}/build/consumer" --optimizer adam --lr 1e-3
                        --steps 5 --quiet --checkpoint-dir "${WORK_DIR}/run" RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the consumer failed: ${rc}")
endif()
execute_process(COMMAND ${MPIEXEC} -n 2 "${WORK_DIR}/build/watched" RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the program linked with distop::watchdog failed: ${rc}")
endif()
