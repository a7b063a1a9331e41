// What the RPC server (rpc.cc) and client (rpc_client.cc) share: ZeroMQ frames of a
// message, and the timings both sides use. Internal to src/ps.
#pragma once

#include <chrono>
#include <vector>
#include <zmq.hpp>

#include "ps/wire.h"

namespace kolo::ps::rpc_detail {

// Every thread that owns a socket polls with this timeout, so a stop is seen promptly.
inline constexpr auto kPollInterval = std::chrono::milliseconds(50);
// A connection must finish its handshake (and authentication) within this, as a TCP
// store client must send its hello (docs/rendezvous.md).
inline constexpr int kHandshakeMs = 10000;
// The most a thread waits to hand a message to an I/O thread over inproc (which drains
// continually; the bound only keeps a wedged one from blocking its callers for good).
inline constexpr int kHandOverMs = 10000;

// The header frame, then one frame per blob (copied: a caller that timed out may free
// its request while libzmq still queues it).
inline std::vector<zmq::message_t> encode_frames(const WireHeader& h, const Message& m) {
  std::vector<zmq::message_t> frames;
  frames.reserve(1 + m.blobs.size());
  const std::string header = WireCodec::encode(h, m.fields);
  frames.emplace_back(header.data(), header.size());
  for (const auto& b : m.blobs) frames.emplace_back(b.data(), b.size());
  return frames;
}

}  // namespace kolo::ps::rpc_detail
