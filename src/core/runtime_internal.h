// The runtime's internal types, shared by its files: runtime.cc (construction, submission,
// handles), runtime_loop.cc (the background thread's loop and its cycle steps) and
// runtime_sets.cc (process sets). Not for: anything outside src/core/runtime*.cc.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <vector>

#include "core/autotune.h"
#include "core/controller.h"
#include "core/device_path.h"
#include "core/fusion.h"
#include "core/pacer.h"
#include "core/runtime.h"

namespace kolo::core {

// The handles' CycleHelper. Owns the gate, so a waiter that holds the helper may lock it
// after the Runtime is gone (it then finds `runtime` null).
struct Runtime::Helper final : detail::CycleHelper {
  CycleGate gate;
  Runtime* runtime = nullptr;  // (gate.mu) null once the Runtime is destroyed

  void help(const detail::HandleState& state) override;
};

// A process set this rank is a member of: its communicator and its controller.
struct ProcessSetState {
  // `global`: the job's communicator, used by the global set; other sets own theirs.
  ProcessSetState(const Config& config, transport::Communicator* global,
                  std::unique_ptr<transport::Communicator> own, int id, std::vector<int> members)
      : owned(std::move(own)), controller(config, owned ? owned.get() : global, id, members) {}
  std::unique_ptr<transport::Communicator> owned;  // null for the global set
  Controller controller;                           // destroyed before `owned`
  // Device tensors' collectives among the set (device_path.h), made at its first such
  // response; destroyed before `owned` and before the loop's device.
  std::unique_ptr<DevicePath> device_path;
};

// The background thread's state between cycles.
struct Runtime::Loop {
  Loop(Inbox& inbox, transport::CycleBell* bell) : pacer(inbox, bell) {}
  // This rank's device, made at the first response of device tensors (Runtime's
  // DeviceFactory); declared before `sets`, whose device paths use it, so it outlives them.
  std::unique_ptr<device::Device> device;
  int device_index = -1;     // its CUDA ordinal
  Status device_status;      // why there is none, once making it failed
  bool device_busy = false;  // device paths have groups running (polled every cycle)
  // One controller per process set this rank is in, by id, each negotiating among its own
  // ranks over its own communicator. Every cycle runs them in id order on every rank (the
  // global set first), so no two ranks wait for each other in different sets.
  std::map<int, ProcessSetState> sets;
  FusionBuffer fusion_buffer;
  std::unique_ptr<Autotuner> autotuner;  // rank 0 with KOLO_AUTOTUNE only
  Pacer pacer;
  bool oversubscribed = false;  // a helping waiter yields its CPU instead of spinning
  std::chrono::steady_clock::duration peer_timeout{};
  bool must_cycle = false;  // a controller has news for the next cycle (bell only)
  // A set other than the global one was busy in the last cycle: the next global cycle
  // says so to every rank, so that timer-paced ranks outside the set do not back off.
  bool sets_busy = false;
  Status fatal;
  bool shutdown = false;
  std::vector<int> shutdown_ranks, exited_ranks;  // who stopped, for the pending ops' error
};

}  // namespace kolo::core
