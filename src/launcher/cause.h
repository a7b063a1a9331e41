// Cause: which worker's failure ended the job, chosen from every exit report that came
// in, and what mpirun's own messages say about workers whose shim never reported.
//
// The first report to arrive is often not the cause. When one rank dies, the others
// notice within milliseconds and exit with errors of their own, and mpirun forwards
// their reports in whatever order it reads its pipes: with 16 ranks a survivor's report
// usually beats the dead rank's. So kolorun collects reports for a short, bounded window
// (supervisor.h) and then chooses by what each report says. Pure: reports and lines in,
// a choice out. Not for: the timing of that window (supervisor.h) or the marker's
// format (events.h).
#pragma once

#include <map>
#include <optional>
#include <string_view>
#include <vector>

#include "launcher/events.h"

namespace kolo::launcher {

// How strongly a report explains the end of the job:
//   0: not at all (the worker succeeded, or it was stopped by the job's own shutdown);
//   1: its program exited with a non-zero status (often a survivor reporting a peer);
//   2: its program died by a signal, its shim was stopped from outside the job, or its
//      shim was lost (mpirun reported it dead without a marker).
int cause_weight(const WorkerExit& e);

// The report that caused the job's end: the highest weight; among those, the earliest
// time_us where both are known (the shims stamp when they saw the program end, which
// arrival order does not keep); then the earliest to arrive. nullopt if none weighs > 0.
std::optional<WorkerExit> choose_cause(const std::vector<WorkerExit>& in_arrival_order);

// The candidates without those whose kolo ended because other candidates left: `after`
// maps a rank to the ranks whose leaving ended its operations (launcher_keys.h). A rank
// whose program failed by itself (returned 1 from main) ends a moment after the ranks
// waiting for it, which fail at once; by time alone they were taken for the cause. All
// candidates when every one of them names another (nothing better is known).
std::vector<WorkerExit> without_consequences(const std::vector<WorkerExit>& candidates,
                                             const std::map<int, std::vector<int>>& after);

// Reads mpirun's own lines (not the workers'), one at a time, for what OpenMPI 4.1 says
// when it ends a job by itself: that it is aborting, and which process made it.
class MpirunMessages {
 public:
  void feed(std::string_view line);
  // mpirun said it is aborting the job ("... Per user-direction, the job has been
  // aborted.", or one of the process reports below).
  bool aborting() const { return aborting_; }
  // The processes mpirun named since the last call, as shim_lost reports:
  //   "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed)."
  //   "  Process name: [[24311,1],1]" followed by "  Exit code:    143".
  std::vector<WorkerExit> take_named();

 private:
  bool aborting_ = false;
  int pending_rank_ = -1;  // from "Process name:", waiting for its "Exit code:"
  std::vector<WorkerExit> named_;
};

}  // namespace kolo::launcher
