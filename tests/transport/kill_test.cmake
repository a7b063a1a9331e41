# ctest driver of the transports' kill tests: runs a check program's kill mode under
# mpirun or kolorun's own launcher and checks (1) one "PASS [rank r] <PASS>" line per
# surviving rank and no FAIL, (2) no /dev/shm/kolo-* file that was not there before the job
# is left behind, (3) under kolorun: the job's end as kolorun tells it (the victim's death
# as its cause, kolorun's status 128 + 9, when it SIGKILLs itself; else status 0).
#   cmake -DMPIRUN=.. -DNP=3 -DVICTIM=2 -DPASS="shm kill-test" -DCHECK=path/to/kolo_shm_check
#         -P kill_test.cmake                          (the check's args: --kill-rank VICTIM)
#   cmake -DKOLORUN=path/to/kolorun ...               kolorun instead of mpirun
#   cmake ... -DHOSTS=2 ...                           fake hosts (KOLO_TEST_HOSTS)
#   cmake ... -DARGS=--kill-test,--kill-op,and,--kill-rank,2 -DSIGKILL=0 ...
#                                                     other check args (commas), and whether
#                                                     the victim SIGKILLs itself (default 1)
file(GLOB before /dev/shm/kolo-*)
set(env KOLO_FUSION_THRESHOLD=1048576)
set(forward -x KOLO_FUSION_THRESHOLD)
if(HOSTS)
  list(APPEND env KOLO_TEST_HOSTS=${HOSTS})
  list(APPEND forward -x KOLO_TEST_HOSTS)
endif()
if(DEFINED ARGS)
  string(REPLACE "," ";" args "${ARGS}")
else()
  set(args --kill-rank ${VICTIM})
endif()
if(NOT DEFINED SIGKILL)
  set(SIGKILL 1)
endif()
if(KOLORUN)
  # The victim's death ends the job: the survivors get 30 s (they need milliseconds) to
  # print their verdicts before kolorun stops them.
  set(launch ${KOLORUN} --grace-seconds 30 -np ${NP})
else()
  # --enable-recovery keeps mpirun from killing the survivors as soon as the victim dies.
  set(launch ${MPIRUN} --allow-run-as-root --oversubscribe --enable-recovery ${forward}
             -np ${NP})
endif()
# 1 MiB regions make each 16 MiB allreduce many chunks.
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env ${env} ${launch} ${CHECK} ${args}
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 90)
file(GLOB after /dev/shm/kolo-*)
if(before)
  list(REMOVE_ITEM after ${before})
endif()
message("${out}")
message("${err}")
string(REGEX MATCHALL "PASS \\[rank [0-9]+\\] ${PASS}" passes "${out}")
list(LENGTH passes npass)
math(EXPR survivors "${NP} - 1")
if(after)
  message(FATAL_ERROR "left behind in /dev/shm: ${after}")
endif()
if(NOT npass EQUAL survivors OR out MATCHES "FAIL")
  message(FATAL_ERROR "expected ${survivors} PASS lines and no FAIL (launcher: ${rc})")
endif()
if(KOLORUN)
  if(SIGKILL AND NOT (rc EQUAL 137 AND err MATCHES "kolorun: rank ${VICTIM} [^\n]*killed by signal 9"))
    message(FATAL_ERROR "kolorun (status ${rc}) did not name rank ${VICTIM}'s SIGKILL as the "
                        "job's end")
  endif()
  if(NOT SIGKILL AND NOT rc EQUAL 0)
    message(FATAL_ERROR "kolorun exited with ${rc}, expected 0 (the victim exits with 0)")
  endif()
endif()
