# Runs scripts/plot-metrics.sh on a small metrics CSV and checks that it writes a PNG, and that a
# missing or empty CSV is a clear error. cmake -DSCRIPT=... -DWORK_DIR=... -P plot_metrics.cmake
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
file(WRITE ${WORK_DIR}/metrics.csv
     "epoch,train_loss,train_accuracy,test_accuracy,seconds\n"
     "1,0.612345,0.781250,0.823400,12.345\n"
     "2,0.421000,0.851000,0.842000,12.100\n"
     "3,0.362000,0.871000,0.858000,12.050\n")
execute_process(COMMAND bash ${SCRIPT} ${WORK_DIR}/metrics.csv ${WORK_DIR}/curves.png
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "plot-metrics.sh failed (${rc}): ${err}")
endif()
if(NOT EXISTS ${WORK_DIR}/curves.png)
  message(FATAL_ERROR "plot-metrics.sh wrote no ${WORK_DIR}/curves.png")
endif()
file(READ ${WORK_DIR}/curves.png signature LIMIT 8 HEX)
if(NOT signature STREQUAL "89504e470d0a1a0a")
  message(FATAL_ERROR "curves.png starts with ${signature}, not the PNG signature")
endif()

file(WRITE ${WORK_DIR}/empty.csv "")
foreach(bad missing.csv empty.csv)
  execute_process(COMMAND bash ${SCRIPT} ${WORK_DIR}/${bad} ${WORK_DIR}/bad.png
                  RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(rc EQUAL 0 OR NOT err MATCHES "plot-metrics: .*${bad}")
    message(FATAL_ERROR "plot-metrics.sh on ${bad}: exit ${rc}, expected an error naming it: ${err}")
  endif()
endforeach()
