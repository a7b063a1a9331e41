# ctest driver of the transports' kill tests: runs a check program's --kill-rank mode
# under mpirun and checks (1) one "PASS [rank r] <TAG> kill-test" line per surviving rank
# and no FAIL, (2) no /dev/shm/kolo-* file that was not there before the job is left behind.
#   cmake -DMPIRUN=.. -DNP=3 -DVICTIM=2 -DTAG=shm -DCHECK=path/to/kolo_shm_check -P kill_test.cmake
#   cmake ... -DHOSTS=2 -DTAG=hier -DCHECK=path/to/kolo_hier_check ...  (fake hosts)
file(GLOB before /dev/shm/kolo-*)
set(env KOLO_FUSION_THRESHOLD=1048576)
set(forward -x KOLO_FUSION_THRESHOLD)
if(HOSTS)
  list(APPEND env KOLO_TEST_HOSTS=${HOSTS})
  list(APPEND forward -x KOLO_TEST_HOSTS)
endif()
# --enable-recovery keeps mpirun from killing the survivors as soon as the victim dies.
# 1 MiB regions make each 16 MiB allreduce many chunks.
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env ${env}
          ${MPIRUN} --allow-run-as-root --oversubscribe --enable-recovery ${forward}
          -np ${NP} ${CHECK} --kill-rank ${VICTIM}
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 90)
file(GLOB after /dev/shm/kolo-*)
if(before)
  list(REMOVE_ITEM after ${before})
endif()
message("${out}")
string(REGEX MATCHALL "PASS \\[rank [0-9]+\\] ${TAG} kill-test" passes "${out}")
list(LENGTH passes npass)
math(EXPR survivors "${NP} - 1")
if(after)
  message(FATAL_ERROR "left behind in /dev/shm: ${after}")
endif()
if(NOT npass EQUAL survivors OR out MATCHES "FAIL")
  message(FATAL_ERROR "expected ${survivors} PASS lines and no FAIL (mpirun: ${rc})\n${err}")
endif()
