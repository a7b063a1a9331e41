// The methods every task of a parameter-server job serves besides the ps service's
// (ps_service_wire.h), spelled once for the callers and the servers:
//
//   stop             the chief, at the end: a worker's or ps task's serving ends (task.h,
//                    coordinator.h's WorkerService).
//   chief.heartbeat  the chief, every second: the task's chief is alive (task.h).
//   run              the chief's coordinator: run a registered step. Fields: step, args
//                    blob; reply: the step's result blob (coordinator.h).
//   ping             the chief's coordinator: is the worker up? Reply: incarnation.
#pragma once

namespace kolo::ps::task_wire {

inline constexpr const char* kStop = "stop";
inline constexpr const char* kChiefHeartbeat = "chief.heartbeat";
inline constexpr const char* kRun = "run";
inline constexpr const char* kPing = "ping";

}  // namespace kolo::ps::task_wire
