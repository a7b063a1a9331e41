// The timeline: a parseable Chrome trace with every phase of every tensor, in order, and
// the waits it is meant to show (a late rank appears as wait_for_ranks on rank 0).
#include "core/timeline.h"
#include "core/ops.h"

#include <fstream>
#include <map>
#include <thread>

#include <unistd.h>
#include <nlohmann/json.hpp>

#include "core/testing/ranks.h"

namespace kolo::core {
namespace {

using namespace testing;  // NOLINT: test helpers
using nlohmann::json;

std::string temp_path(const std::string& tag) {
  return ::testing::TempDir() + "kolo_timeline_" + tag + "_" + std::to_string(::getpid()) + ".json";
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return json::parse(in);  // throws (failing the test) if it is not valid JSON
}

const char* const kPhases[] = {"negotiate", "wait_for_ranks", "pack", "communicate", "unpack"};

// tensor name -> phase -> events, from a parsed trace.
std::map<std::string, std::map<std::string, std::vector<json>>> by_tensor(const json& trace) {
  std::map<int, std::string> rows;
  for (const auto& e : trace) {
    if (e.value("ph", "") == "M" && e.value("name", "") == "thread_name") {
      rows[e.at("tid").get<int>()] = e.at("args").at("name").get<std::string>();
    }
  }
  std::map<std::string, std::map<std::string, std::vector<json>>> out;
  for (const auto& e : trace) {
    if (e.value("ph", "") != "X") continue;
    out[rows.at(e.at("tid").get<int>())][e.at("name").get<std::string>()].push_back(e);
  }
  return out;
}

void submit_round(int rank, Runtime& rt, int round, std::vector<float>& a, std::vector<float>& b,
                  std::vector<float>& c) {
  AllreduceOptions oa;
  oa.name = "grad.a";
  AllreduceOptions ob;
  ob.name = "grad.b";
  AllgatherOptions og;
  og.name = "gathered";
  BroadcastOptions oc;
  oc.name = "weights";
  Handle ha = ops::allreduce(rt, {view_of(a, DataType::kFloat32)}, {view_of(a, DataType::kFloat32)},
                             oa, false);
  Handle hb = ops::allreduce(rt, {view_of(b, DataType::kFloat32)}, {view_of(b, DataType::kFloat32)},
                             ob, false);
  Handle hg = ops::allgather(rt, view_of(c, DataType::kFloat32), og);
  Handle hc = ops::broadcast(rt, view_of(c, DataType::kFloat32), oc);
  for (Handle* h : {&ha, &hb, &hg, &hc}) h->wait();
  (void)rank;
  (void)round;
}

TEST(TimelineTest, EveryPhaseOfEveryTensorInOrderAndLateRanksShowAsWaits) {
  const std::string path = temp_path("env");
  Config config = test_config();
  config.timeline_path = path;
  config.timeline_mark_cycles = true;
  constexpr int kRounds = 3;
  run_ranks(2, config, [](int rank, Runtime& rt) {
    std::vector<float> a(1000, 1.0f), b(10, 2.0f), c(4, 3.0f);
    for (int round = 0; round < kRounds; ++round) {
      // Rank 1 is late in round 0: rank 0's first tensors must wait for it.
      if (rank == 1 && round == 0) std::this_thread::sleep_for(std::chrono::milliseconds(60));
      submit_round(rank, rt, round, a, b, c);
    }
  });
  const json trace = read_json(path);
  ASSERT_TRUE(trace.is_array());
  const auto tensors = by_tensor(trace);
  for (const char* name : {"grad.a", "grad.b", "gathered", "weights"}) {
    ASSERT_TRUE(tensors.count(name)) << "no row for " << name;
    const auto& phases = tensors.at(name);
    for (const char* phase : kPhases) {
      ASSERT_TRUE(phases.count(phase)) << name << " has no " << phase;
      ASSERT_EQ(phases.at(phase).size(), static_cast<std::size_t>(kRounds)) << name << " " << phase;
    }
    for (int round = 0; round < kRounds; ++round) {
      double end = -1;
      for (const char* phase : kPhases) {
        const json& e = phases.at(phase)[round];
        const double ts = e.at("ts").get<double>();
        const double dur = e.at("dur").get<double>();
        EXPECT_GE(dur, 0) << name << " " << phase;
        EXPECT_GE(ts + 1e-3, end) << name << " round " << round << ": " << phase
                                  << " starts before the previous phase ended";
        end = ts + dur;
        EXPECT_EQ(e.at("args").at("op").get<std::string>(),
                  std::string(name) == "gathered"  ? "allgather"
                  : std::string(name) == "weights" ? "broadcast"
                                                   : "allreduce");
      }
    }
  }
  const double waited = tensors.at("grad.a").at("wait_for_ranks")[0].at("dur").get<double>();
  EXPECT_GT(waited, 20000) << "rank 1 was 60 ms late, but grad.a's wait_for_ranks lasted " << waited
                           << " us";
  EXPECT_EQ(tensors.at("grad.a").at("pack")[0].at("args").at("bytes").get<int>(), 4000);
  int cycles = 0;
  for (const auto& e : trace) cycles += e.value("name", "") == "cycle" && e.value("ph", "") == "i";
  EXPECT_GE(cycles, kRounds) << "KOLO_TIMELINE_MARK_CYCLES=1 but no cycle markers";
  std::remove(path.c_str());
}

TEST(TimelineTest, StartAndStopAtRunTimeRecordOnlyInBetween) {
  const std::string path = temp_path("runtime");
  run_ranks(2, test_config(), [&](int rank, Runtime& rt) {
    std::vector<float> a(8, 1.0f), b(8, 1.0f), c(4, 1.0f);
    submit_round(rank, rt, 0, a, b, c);  // before: not recorded
    ASSERT_TRUE(rt.start_timeline(path, false).ok());
    AllreduceOptions o;
    o.name = "during";
    ops::allreduce(rt, {view_of(a, DataType::kFloat32)}, {view_of(a, DataType::kFloat32)}, o, false)
        .wait();
    ops::barrier(rt, {}).wait();
    rt.stop_timeline();
    o.name = "after";
    ops::allreduce(rt, {view_of(a, DataType::kFloat32)}, {view_of(a, DataType::kFloat32)}, o, false)
        .wait();
  });
  const auto tensors = by_tensor(read_json(path));
  EXPECT_TRUE(tensors.count("during"));
  EXPECT_FALSE(tensors.count("grad.a")) << "recorded before start_timeline";
  EXPECT_FALSE(tensors.count("after")) << "recorded after stop_timeline";
  for (const char* phase : kPhases) EXPECT_EQ(tensors.at("during").at(phase).size(), 1u) << phase;
  std::remove(path.c_str());
}

TEST(TimelineTest, UnwritablePathIsAClearError) {
  Timeline t;
  const Status s = t.start("/nonexistent-dir/kolo/timeline.json", false);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("/nonexistent-dir/kolo/timeline.json"), std::string::npos)
      << s.message();
  EXPECT_FALSE(t.active());
}

TEST(TimelineTest, NamesAreEscaped) {
  const std::string path = temp_path("escape");
  Timeline t;
  ASSERT_TRUE(t.start(path, false).ok());
  Timeline::Phases p;
  p.enqueued = p.first_cycle_end = p.response = p.pack_start = p.comm_start = p.comm_end =
      p.unpack_end = Timeline::Clock::now();
  const std::string odd = "layer\"1\\weight\n\x01";
  t.record(odd, "allreduce", 4, p);
  t.stop();
  const auto tensors = by_tensor(read_json(path));
  EXPECT_TRUE(tensors.count(odd));
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kolo::core
