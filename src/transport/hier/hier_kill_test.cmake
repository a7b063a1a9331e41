# ctest driver of the hierarchical kill test: runs kolo_hier_check --kill-rank under
# mpirun with fake hosts and checks (1) one PASS line per surviving rank and no FAIL,
# (2) no /dev/shm/kolo-* file that was not there before the job is left behind.
#   cmake -DMPIRUN=.. -DNP=4 -DHOSTS=2 -DVICTIM=3 -DCHECK=path/to/kolo_hier_check
#         -P hier_kill_test.cmake
file(GLOB before /dev/shm/kolo-*)
# --enable-recovery keeps mpirun from killing the survivors as soon as the victim dies.
# 1 MiB regions make each 16 MiB allreduce many chunks.
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env KOLO_FUSION_THRESHOLD=1048576 KOLO_TEST_HOSTS=${HOSTS}
          ${MPIRUN} --allow-run-as-root --oversubscribe --enable-recovery
          -x KOLO_FUSION_THRESHOLD -x KOLO_TEST_HOSTS -np ${NP} ${CHECK} --kill-rank ${VICTIM}
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 90)
file(GLOB after /dev/shm/kolo-*)
if(before)
  list(REMOVE_ITEM after ${before})
endif()
message("${out}")
string(REGEX MATCHALL "PASS \\[rank [0-9]+\\] hier kill-test" passes "${out}")
list(LENGTH passes npass)
math(EXPR survivors "${NP} - 1")
if(after)
  message(FATAL_ERROR "left behind in /dev/shm: ${after}")
endif()
if(NOT npass EQUAL survivors OR out MATCHES "FAIL")
  message(FATAL_ERROR "expected ${survivors} PASS lines and no FAIL (mpirun: ${rc})\n${err}")
endif()
