// A stand-in for an elastic kolo worker (elastic_launcher_test.cc): no kolo runtime, only
// the worker side of docs/elastic.md's store protocol, so that kolorun's elastic driver is
// tested with real processes.
//
//   elastic_fake_worker CONTROL_DIR
//
// For each generation: waits for a plan newer than its last (at most
// KOLO_ELASTIC_TIMEOUT_SECONDS), leaves ("gen G removed id I", exit 0) when the plan does
// not hold it, sets elastic/<g>/arrived/<rank>, waits for every rank (a newer plan abandons
// g), then prints "gen G rank R size S id I pid P". While "training" it polls every 20 ms:
// a newer plan (as at a commit) or a published worker exit in g (as a peer failure: then a
// reset request if no newer plan comes within 1 s) starts the next generation;
// elastic/finished ends it with status 0. Files in CONTROL_DIR tell it what to do, where
// WHO is its id or "all":
//   exit0.WHO      exit 0 (training is over)
//   fail.WHO       exit 3
//   failstart.WHO  exit 4 before it arrives at its first start barrier
//   reset.WHO      bump elastic/<g>/reset_requests (once in the process's life)
//   stay.WHO       once removed from the plan, do not leave (wait to be stopped)
// Not for: anything the kolo runtime does (tests/multiprocess, src/core's tests).
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "launcher/elastic_plan.h"
#include "rendezvous/tcp_store.h"

namespace {

using kolo::Status;
using kolo::launcher::PlanMember;
using kolo::rendezvous::TcpStore;
using Clock = std::chrono::steady_clock;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

int fail(const std::string& what) {
  std::cerr << "elastic_fake_worker: " << what << std::endl;
  return 1;
}

class Worker {
 public:
  Worker(std::unique_ptr<TcpStore> store, std::string dir)
      : store_(std::move(store)), dir_(std::move(dir)) {
    id_ = std::atoi(env("KOLO_ELASTIC_ID").c_str());
    last_ = std::atoi(env("KOLO_ELASTIC_GENERATION").c_str()) - 1;
    const double t = std::atof(env("KOLO_ELASTIC_TIMEOUT_SECONDS").c_str());
    timeout_ = t > 0 ? t : 600;
  }
  int run();

 private:
  bool told(const std::string& what) const {
    return ::access((dir_ + "/" + what + "." + std::to_string(id_)).c_str(), F_OK) == 0 ||
           ::access((dir_ + "/" + what + ".all").c_str(), F_OK) == 0;
  }
  std::int64_t counter(const std::string& key) {
    std::string v;
    bool found = false;
    if (!store_->try_get(key, &v, &found).ok() || !found) return 0;
    return std::atoll(v.c_str());
  }
  bool finished() {
    std::string v;
    bool found = false;
    return store_->try_get("elastic/finished", &v, &found).ok() && found;
  }
  void pause() { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }

  std::unique_ptr<TcpStore> store_;
  std::string dir_;
  int id_ = 0, last_ = -1;
  double timeout_ = 600;
  bool arrived_once_ = false;
  bool reset_sent_ = false;  // reset.WHO asks once per process
};

int Worker::run() {
  for (;;) {
    // 1. The newest plan, newer than the last one this worker was in.
    const auto until = Clock::now() + std::chrono::duration<double>(timeout_);
    int g = -1;
    while (g <= last_) {
      g = static_cast<int>(counter("elastic/generations")) - 1;
      if (g > last_) break;
      if (finished()) return 0;
      if (Clock::now() > until) return fail("no new plan within the elastic timeout");
      pause();
    }
    std::string text;
    if (Status s = store_->get("elastic/plan/" + std::to_string(g), kolo::deadline_after(5), &text);
        !s.ok()) {
      return fail(s.message());
    }
    std::vector<PlanMember> plan;
    if (Status s = kolo::launcher::parse_plan(text, &plan); !s.ok()) return fail(s.message());
    int rank = -1;
    for (size_t r = 0; r < plan.size(); ++r) {
      if (plan[r].id == id_) rank = static_cast<int>(r);
    }
    if (rank < 0) {
      std::cout << "gen " << g << " removed id " << id_ << std::endl;
      if (!told("stay")) return 0;
      for (;;) pause();  // until the driver stops it
    }
    last_ = g;
    if (!arrived_once_ && told("failstart")) return 4;
    // 2. The start barrier.
    const std::string prefix = "elastic/" + std::to_string(g) + "/";
    if (!store_->set(prefix + "arrived/" + std::to_string(rank), "1").ok()) {
      return fail("cannot set my arrival");
    }
    arrived_once_ = true;
    std::vector<std::string> keys;
    for (size_t r = 0; r < plan.size(); ++r)
      keys.push_back(prefix + "arrived/" + std::to_string(r));
    bool all = false, abandoned = false;
    while (!all && !abandoned) {
      if (!store_->check(keys, &all).ok()) return fail("store check failed");
      if (all) break;
      abandoned = counter("elastic/generations") > g + 1;
      if (Clock::now() > until) return fail("the start barrier did not complete");
      pause();
    }
    if (abandoned) continue;
    std::cout << "gen " << g << " rank " << rank << " size " << plan.size() << " id " << id_
              << " pid " << ::getpid() << std::endl;
    // 3. "Training" until something ends this generation.
    std::optional<Clock::time_point> peer_failed;
    for (;;) {
      if (told("exit0")) return 0;
      if (told("fail")) return 3;
      if (finished()) return 0;
      if (counter("elastic/generations") > g + 1) break;
      if (told("reset") && !reset_sent_) {
        std::int64_t n = 0;
        (void)store_->add(prefix + "reset_requests", 1, &n);
        reset_sent_ = true;
      }
      if (!peer_failed && counter(prefix + "launcher/exits") > 0) peer_failed = Clock::now();
      if (peer_failed && Clock::now() - *peer_failed > std::chrono::seconds(1)) {
        std::int64_t n = 0;
        (void)store_->add(prefix + "reset_requests", 1, &n);
        peer_failed = Clock::now() + std::chrono::hours(1);  // once
      }
      pause();
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return fail("usage: elastic_fake_worker CONTROL_DIR");
  const std::string addr = env("KOLO_RENDEZVOUS_ADDR");
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos) return fail("KOLO_RENDEZVOUS_ADDR=" + addr);
  kolo::rendezvous::TcpStoreOptions o;
  o.host = addr.substr(0, colon);
  o.port = std::atoi(addr.c_str() + colon + 1);
  o.secret = env("KOLO_RENDEZVOUS_SECRET");
  o.connect_timeout_s = 5;
  o.io_timeout_s = 5;
  std::unique_ptr<TcpStore> store;
  if (Status s = TcpStore::connect(o, &store); !s.ok()) return fail(s.message());
  Worker w(std::move(store), argv[1]);
  return w.run();
}
