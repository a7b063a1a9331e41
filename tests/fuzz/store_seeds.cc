// Writes the seed inputs of the TCP store's fuzz targets (store_wire_fuzz.cc,
// store_server_fuzz.cc; layout in store_fuzz_input.h) into a directory: a valid frame of
// every op after a hello, hellos with the right, a wrong, an empty and no secret, streams
// of several requests cut into pieces, and the frames the server must refuse (truncated,
// oversized lengths, bad magic, version and op, trailing bytes, fields past the end or
// over a limit, requests before the hello, a second hello, a one-key op with two keys).
// scripts/fuzz.sh starts from these; the committed corpus holds them and what the fuzzer
// added.
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "rendezvous/tcp_store_wire.h"
#include "store_fuzz_input.h"

namespace {

namespace wire = kolo::rendezvous::wire;
using kolo::fuzz::StoreFuzzInput;
using wire::Message;
using wire::Op;

Message msg(Op op, std::vector<std::string> keys = {}, std::string value = {},
            std::int64_t number = 0, std::string detail = {}) {
  Message m;
  m.op = op;
  m.keys = std::move(keys);
  m.value = std::move(value);
  m.number = number;
  m.detail = std::move(detail);
  return m;
}

std::string frame(const Message& m) {
  std::string f;
  if (!wire::encode(m, &f).ok()) std::abort();
  return f;
}

std::string hello(const std::string& secret = kolo::fuzz::kStoreFuzzSecret) {
  return frame(msg(Op::kHello, {}, secret));
}

std::string le32(std::uint32_t v) {
  std::string s;
  for (int i = 0; i < 4; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A frame with its body changed by `edit` and its length fixed to match.
template <typename Edit>
std::string edited(const Message& m, Edit edit) {
  std::string body = frame(m).substr(wire::kLengthBytes);
  edit(&body);
  return le32(static_cast<std::uint32_t>(body.size())) + body;
}

std::string input(const std::string& stream, std::vector<std::size_t> cuts = {},
                  bool auto_hello = false, bool no_secret = false) {
  StoreFuzzInput in;
  in.stream = stream;
  in.cuts = std::move(cuts);
  in.hello = auto_hello;
  in.no_secret = no_secret;
  return kolo::fuzz::make_store_fuzz_input(in);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  constexpr std::int64_t kMs = 1000 * 1000;  // a wait time of 1 ms, in ns
  const std::vector<std::pair<std::string, Message>> ops = {
      {"set", msg(Op::kSet, {"k"}, "v")},
      {"get", msg(Op::kGet, {"k"})},
      {"get_parks", msg(Op::kGet, {"missing"}, {}, kMs)},
      {"try_get", msg(Op::kTryGet, {"k"})},
      {"check", msg(Op::kCheck, {"k", "other"})},
      {"add", msg(Op::kAdd, {"n"}, {}, 5)},
      {"add_overflow", msg(Op::kAdd, {"n"}, {}, std::numeric_limits<std::int64_t>::max())},
      {"compare_set", msg(Op::kCompareSet, {"k"}, "", 0, "desired")},
      {"wait", msg(Op::kWait, {"k", "missing"}, {}, kMs)},
      {"wait_now", msg(Op::kWait, {"k"})},
      {"erase", msg(Op::kErase, {"k"})},
      {"empty_key", msg(Op::kSet, {""}, "v")},
  };
  std::vector<std::pair<std::string, std::string>> seeds;
  std::string all = hello();
  for (const auto& [name, m] : ops) {
    seeds.emplace_back("op_" + name, input(hello() + frame(m)));
    all += frame(m);
  }
  seeds.emplace_back("op_set_auto_hello", input(frame(msg(Op::kSet, {"k"}, "v")), {}, true));
  seeds.emplace_back("every_op", input(all));
  seeds.emplace_back("every_op_cut", input(all, {1, 3, 17, 40, 2, 64, 5}));
  seeds.emplace_back("set_then_get_cut_bytewise",
                     input(hello() + frame(msg(Op::kSet, {"k"}, "v")) + frame(msg(Op::kGet, {"k"})),
                           {1, 1, 1, 1, 1, 1, 1}));
  seeds.emplace_back("add_to_text", input(hello() + frame(msg(Op::kSet, {"n"}, "text")) +
                                          frame(msg(Op::kAdd, {"n"}, {}, 1))));
  seeds.emplace_back("parked_then_more",
                     input(hello() + frame(msg(Op::kGet, {"late"}, {}, kMs)) +
                           frame(msg(Op::kSet, {"late"}, "x")) + frame(msg(Op::kGet, {"late"}))));
  seeds.emplace_back("parked_then_bad", input(hello() + frame(msg(Op::kGet, {"late"}, {}, kMs)) +
                                              frame(msg(Op::kSet, {"a", "b"}))));
  // Hellos.
  seeds.emplace_back("hello_only", input(hello()));
  seeds.emplace_back("hello_wrong_secret", input(hello("not-the-secret")));
  std::string off_by_one = kolo::fuzz::kStoreFuzzSecret;
  off_by_one.back() = static_cast<char>(off_by_one.back() ^ 1);
  seeds.emplace_back("hello_secret_one_bit_off", input(hello(off_by_one)));
  seeds.emplace_back("hello_empty_secret", input(hello("")));
  seeds.emplace_back("hello_to_server_without_secret",
                     input(hello("") + frame(msg(Op::kSet, {"k"}, "v")), {}, false, true));
  seeds.emplace_back("hello_any_to_server_without_secret",
                     input(hello("x") + frame(msg(Op::kGet, {"k"})), {}, false, true));
  // What the server must refuse.
  const Message set = msg(Op::kSet, {"k"}, "v");
  seeds.emplace_back("request_before_hello", input(frame(set)));
  seeds.emplace_back("second_hello", input(hello() + hello()));
  seeds.emplace_back("reply_from_client", input(hello() + frame(msg(Op::kReply))));
  seeds.emplace_back("set_two_keys", input(hello() + frame(msg(Op::kSet, {"a", "b"}, "v"))));
  seeds.emplace_back("get_no_keys", input(hello() + frame(msg(Op::kGet))));
  seeds.emplace_back("truncated", input(hello() + frame(set).substr(0, 9)));
  seeds.emplace_back("truncated_length", input(hello() + frame(set).substr(0, 2)));
  seeds.emplace_back("length_4gib", input(std::string("\xff\xff\xff\xff", 4)));
  seeds.emplace_back("first_frame_1mib", input(le32(1 << 20)));
  seeds.emplace_back("oversized_after_hello",
                     input(hello() + le32(static_cast<std::uint32_t>(wire::kMaxFrameBytes + 1))));
  seeds.emplace_back("bad_magic",
                     input(hello() + edited(set, [](std::string* b) { (*b)[0] = 'X'; })));
  seeds.emplace_back("bad_version",
                     input(hello() + edited(set, [](std::string* b) { (*b)[2] = 2; })));
  seeds.emplace_back("op_zero", input(hello() + edited(set, [](std::string* b) { (*b)[3] = 0; })));
  seeds.emplace_back("op_past_last", input(hello() + edited(set, [](std::string* b) {
                                             (*b)[3] = static_cast<char>(wire::kLastOp + 1);
                                           })));
  seeds.emplace_back("trailing_bytes",
                     input(hello() + edited(set, [](std::string* b) { *b += "xy"; })));
  // nkeys sits after magic, version, op, code, flag and the number: body offset 14.
  seeds.emplace_back("too_many_keys", input(hello() + edited(set, [](std::string* b) {
                                              b->replace(14, 4, le32(wire::kMaxKeys + 1));
                                            })));
  seeds.emplace_back("many_keys_short_body", input(hello() + edited(set, [](std::string* b) {
                                                     b->replace(14, 4, le32(wire::kMaxKeys));
                                                   })));
  seeds.emplace_back(
      "key_past_end",
      input(hello() + edited(set, [](std::string* b) { b->replace(18, 4, le32(1000)); })));
  seeds.emplace_back("key_over_limit",
                     input(hello() + edited(msg(Op::kSet, {std::string(wire::kMaxKeyBytes, 'k')}),
                                            [](std::string* b) {
                                              b->replace(18, 4, le32(wire::kMaxKeyBytes + 1));
                                              b->insert(22, "k");
                                            })));
  seeds.emplace_back("value_past_end", input(hello() + edited(set, [](std::string* b) {
                                               b->replace(b->size() - 9, 4, le32(0x7fffffff));
                                             })));
  seeds.emplace_back("http", input("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  for (const auto& [name, bytes] : seeds) {
    std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
  }
  std::printf("seeds: wrote %zu inputs to %s\n", seeds.size(), dir.c_str());
  return 0;
}
