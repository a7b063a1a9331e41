// Controller against a peer that does not follow the protocol: rank 0 runs a real
// Controller while rank 1 is driven by hand over the same in-process transport and sends
// what a corrupt or foreign process might. Not for: well-behaved negotiation (the
// runtime tests cover it through Runtime).
#include "core/controller.h"

#include <gtest/gtest.h>

#include <thread>

#include "transport/inproc/inproc.h"

namespace kolo::core {
namespace {

Request request_of(int rank, const std::string& name) {
  Request r;
  r.rank = rank;
  r.name = name;
  r.op = OpType::kAllreduce;
  r.dtype = DataType::kFloat32;
  r.shapes = {{4}};
  return r;
}

struct PeerResult {
  Status status;
  ResponseList list;
};

// Rank 1's side of one slow-path cycle, sending `bytes` as its request list.
PeerResult forge_cycle(transport::Communicator& comm, const std::string& bytes,
                       const Config& config,
                       std::chrono::milliseconds stopped = std::chrono::milliseconds(0)) {
  std::this_thread::sleep_for(stopped);  // as if the process were stopped (SIGSTOP)
  PeerResult out;
  const auto deadline = transport::Clock::now() + std::chrono::seconds(20);
  const int words = (config.cache_capacity + 63) / 64;
  const int rank_words = (comm.size() + 63) / 64;
  std::vector<std::uint64_t> w(1 + 2 * words + 2 * rank_words, ~std::uint64_t{0});
  w[0] = ~std::uint64_t{1};  // the "uncached requests" flag, sent inverted
  for (int i = 0; i < words; ++i) w[1 + i] = 0;
  out.status = comm.control_and(w, deadline);
  if (!out.status.ok()) return out;
  std::vector<std::string> all;
  out.status = comm.control_gather(bytes, &all, deadline);
  if (!out.status.ok()) return out;
  std::string encoded;
  out.status = comm.control_broadcast(&encoded, deadline);
  if (!out.status.ok()) return out;
  out.status = decode_response_list(encoded, &out.list);
  return out;
}

Controller::Cycle coordinator_cycle(transport::Communicator* comm, const Config& config) {
  Controller controller(config, comm);
  return controller.run({request_of(0, "w")}, Controller::Leave::kNo);
}

void expect_both_fail(const std::string& bytes, const std::string& expected) {
  Config config;
  config.peer_timeout_seconds = 20;
  transport::InprocWorld world(2);
  auto c0 = world.communicator(0);
  auto c1 = world.communicator(1);
  PeerResult peer;
  std::thread forger([&] { peer = forge_cycle(*c1, bytes, config); });
  const auto start = std::chrono::steady_clock::now();
  Controller::Cycle cycle = coordinator_cycle(c0.get(), config);
  forger.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  EXPECT_FALSE(cycle.fatal.ok());
  EXPECT_NE(cycle.fatal.message().find(expected), std::string::npos) << cycle.fatal.message();
  EXPECT_TRUE(cycle.responses.empty());
  // The peer hears the coordinator's verdict in the same cycle instead of waiting for
  // its deadline.
  ASSERT_TRUE(peer.status.ok()) << peer.status.to_string();
  EXPECT_NE(peer.list.abort_code, ErrorCode::kOk);
  EXPECT_EQ(peer.list.abort_message, cycle.fatal.message());
  EXPECT_LT(seconds, 10.0);
}

TEST(ControllerPeerTest, RequestInAnotherRanksNameStopsEveryRankNamingTheSender) {
  expect_both_fail(encode_requests({request_of(0, "w")}),
                   "rank 1 sent a request for 'w' in the name of rank 0");
}

TEST(ControllerPeerTest, RankOutsideTheJobIsRefused) {
  expect_both_fail(encode_requests({request_of(1000000, "w")}), "in the name of rank 1000000");
}

TEST(ControllerPeerTest, MalformedRequestListNamesTheSender) {
  expect_both_fail("not a request list", "the request list from rank 1 is malformed");
}

// A rank running another kolo build (another wire version) stops the job at once, naming
// the rank and saying what to do, instead of being misread.
TEST(ControllerPeerTest, AnotherKoloBuildIsNamed) {
  std::string bytes = encode_requests({request_of(1, "w")});
  bytes[1] = static_cast<char>(kWireVersion + 1);
  expect_both_fail(bytes, "rank 1 sent a request message of wire version " +
                              std::to_string(kWireVersion + 1) + " from another kolo build");
}

// A rank that takes no part at all (stopped by SIGSTOP or a debugger) blocks rank 0 in
// the cycle's first control call, where the table-based stall check cannot run: the
// coordinator warns from inside the wait, naming the rank and its own waiting tensors,
// before the peer timeout; once the rank comes back the cycle completes normally.
void expect_warning_while_stopped(const Config& config, std::chrono::milliseconds stopped_for,
                                  const std::string& expected);

TEST(ControllerPeerTest, CoordinatorWarnsWhileARankIsStopped) {
  Config config;
  config.peer_timeout_seconds = 20;
  config.stall_check_seconds = 1;
  expect_warning_while_stopped(config, std::chrono::milliseconds(3500),
                               "s in negotiation for rank 1");
}

// With the default stall check (60 s) as long as the peer timeout, the wait would end in
// a failure before the warning: it comes at half the peer timeout instead.
TEST(ControllerPeerTest, TheWarningComesBeforeThePeerTimeoutWithTheDefaultCheck) {
  Config config;
  config.peer_timeout_seconds = 6;
  ASSERT_EQ(config.stall_check_seconds, 60.0);
  expect_warning_while_stopped(config, std::chrono::milliseconds(4500),
                               "s in negotiation for rank 1");
}

void expect_warning_while_stopped(const Config& config, std::chrono::milliseconds stopped_for,
                                  const std::string& expected) {
  transport::InprocWorld world(2);
  auto c0 = world.communicator(0);
  auto c1 = world.communicator(1);
  PeerResult peer;
  ::testing::internal::CaptureStderr();
  std::thread stopped(
      [&] { peer = forge_cycle(*c1, encode_requests({request_of(1, "w")}), config, stopped_for); });
  Controller controller(config, c0.get());
  Controller::Cycle cycle = controller.run({request_of(0, "w")}, Controller::Leave::kNo);
  stopped.join();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("rank 0 has waited "), std::string::npos) << err;
  EXPECT_NE(err.find(expected), std::string::npos) << err;
  EXPECT_NE(err.find("Tensors of rank 0 waiting: 'w'"), std::string::npos) << err;
  EXPECT_NE(err.find("stopped (SIGSTOP"), std::string::npos) << err;
  ASSERT_TRUE(cycle.fatal.ok()) << cycle.fatal.to_string();
  ASSERT_EQ(cycle.responses.size(), 1u);
  EXPECT_EQ(cycle.responses[0].name, "w");
  EXPECT_FALSE(cycle.responses[0].is_error()) << cycle.responses[0].error;
  ASSERT_TRUE(peer.status.ok()) << peer.status.to_string();
}

}  // namespace
}  // namespace kolo::core
