# ctest smoke test of `kolo_bench allreduce` (cmake -P): runs a 4 B .. 4 KiB sweep under
# kolorun with 2 ranks, then checks that the JSON parses, has ROWS rows, and that every row
# has the documented keys with sensible values.
#   cmake -DKOLORUN=... -DBENCH=... -DOUT=file.json -DROWS=11 -P check_allreduce_json.cmake
file(REMOVE ${OUT})
execute_process(
  COMMAND ${KOLORUN} -np 2 ${BENCH} allreduce --min-bytes 4 --max-bytes 4096 --iters 20 --json ${OUT}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "kolo_bench allreduce failed: ${rc}")
endif()
file(READ ${OUT} text)
string(JSON rows ERROR_VARIABLE err LENGTH "${text}")
if(err)
  message(FATAL_ERROR "${OUT} is not a JSON array: ${err}")
endif()
if(NOT rows EQUAL ROWS)
  message(FATAL_ERROR "${OUT} has ${rows} rows, expected ${ROWS}")
endif()
math(EXPR last "${rows} - 1")
set(bytes_want 4)
foreach(i RANGE ${last})
  foreach(key bytes dtype ranks time_us_median algbw_gbps busbw_gbps)
    string(JSON value ERROR_VARIABLE err GET "${text}" ${i} ${key})
    if(err)
      message(FATAL_ERROR "row ${i} of ${OUT} has no '${key}': ${err}")
    endif()
    set(${key} "${value}")
  endforeach()
  if(NOT bytes EQUAL bytes_want OR NOT ranks EQUAL 2 OR NOT dtype STREQUAL "f32")
    message(FATAL_ERROR "row ${i}: bytes=${bytes} ranks=${ranks} dtype=${dtype}; expected "
                        "bytes=${bytes_want} ranks=2 dtype=f32")
  endif()
  if(NOT time_us_median GREATER 0 OR NOT algbw_gbps GREATER 0 OR NOT busbw_gbps GREATER 0)
    message(FATAL_ERROR "row ${i}: times and bandwidths must be positive: ${time_us_median} "
                        "${algbw_gbps} ${busbw_gbps}")
  endif()
  math(EXPR bytes_want "${bytes_want} * 2")
endforeach()
message(STATUS "${OUT}: ${rows} rows with all keys")
