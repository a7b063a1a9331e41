# ctest driver of the shm kill test: runs kolo_shm_check --kill-rank under mpirun and
# checks (1) one PASS line per surviving rank and no FAIL, (2) no /dev/shm/kolo-* file
# that was not there before the job is left behind.
#   cmake -DMPIRUN=.. -DNP=3 -DVICTIM=2 -DCHECK=path/to/kolo_shm_check -P shm_kill_test.cmake
file(GLOB before /dev/shm/kolo-*)
# --enable-recovery keeps mpirun from killing the survivors as soon as the victim dies.
# A 1 MiB region makes each 16 MiB allreduce many chunks.
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env KOLO_FUSION_THRESHOLD=1048576
          ${MPIRUN} --allow-run-as-root --oversubscribe --enable-recovery -x KOLO_FUSION_THRESHOLD
          -np ${NP} ${CHECK} --kill-rank ${VICTIM}
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 90)
file(GLOB after /dev/shm/kolo-*)
if(before)
  list(REMOVE_ITEM after ${before})
endif()
message("${out}")
string(REGEX MATCHALL "PASS \\[rank [0-9]+\\] shm kill-test" passes "${out}")
list(LENGTH passes npass)
math(EXPR survivors "${NP} - 1")
if(after)
  message(FATAL_ERROR "left behind in /dev/shm: ${after}")
endif()
if(NOT npass EQUAL survivors OR out MATCHES "FAIL")
  message(FATAL_ERROR "expected ${survivors} PASS lines and no FAIL (mpirun: ${rc})\n${err}")
endif()
