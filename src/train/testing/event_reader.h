// Test helper: reads TensorBoard event files, written independently of the writer
// (src/train/summary/event_encoding.cc) so that a test of the writer does not test it against
// itself: its own bitwise CRC-32C, its own varint and protobuf field decoding. It checks
// every record's framing (length, both masked CRCs, nothing left over) and decodes the
// Event fields kolo writes (wall_time, step, file_version, summary values with tag,
// simple_value or histo). Throws std::runtime_error naming the file, the record and the
// byte offset of what is wrong. For kolo_train's tests (summary_test.cc, fit's tests).
//
// Not for: production code (kolo never reads event files), or proto fields kolo does not
// write (they are skipped by wire type, and counted).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kolo::testing {

struct ReadHistogram {
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> bucket_limit, bucket;
};

struct ReadValue {
  std::string tag;
  std::optional<float> simple_value;
  std::optional<ReadHistogram> histo;
};

struct ReadEvent {
  double wall_time = 0;
  std::int64_t step = 0;
  std::optional<std::string> file_version;
  bool has_summary = false;
  std::vector<ReadValue> values;
  int unknown_fields = 0;  // fields of Event, Summary or Value this reader does not know
};

// CRC-32C bit by bit (reflected polynomial 0x82F63B78), and TFRecord's mask.
inline std::uint32_t reader_crc32c(std::string_view bytes) {
  std::uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : bytes) {
    crc ^= byte;
    for (int k = 0; k < 8; ++k) crc = (crc & 1u) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
  }
  return ~crc;
}
inline std::uint32_t reader_masked_crc32c(std::string_view bytes) {
  const std::uint32_t c = reader_crc32c(bytes);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

namespace event_reader_detail {

inline std::uint64_t little_endian(std::string_view b) {
  std::uint64_t v = 0;
  for (std::size_t i = b.size(); i-- > 0;) v = (v << 8) | static_cast<unsigned char>(b[i]);
  return v;
}

struct Field {
  std::uint32_t number = 0;
  std::uint32_t wire = 0;
  std::uint64_t scalar = 0;  // varint, fixed32 or fixed64 value
  std::string_view bytes;    // length-delimited payload
};

class Parser {
 public:
  Parser(std::string_view data, std::string where) : data_(data), where_(std::move(where)) {}
  bool done() const { return pos_ == data_.size(); }

  Field next() {
    Field f;
    const std::uint64_t key = varint();
    f.number = static_cast<std::uint32_t>(key >> 3);
    f.wire = static_cast<std::uint32_t>(key & 7);
    if (f.number == 0) fail("field number 0");
    switch (f.wire) {
      case 0:
        f.scalar = varint();
        break;
      case 1:
        f.scalar = little_endian(take(8));
        break;
      case 2:
        f.bytes = take(varint());
        break;
      case 5:
        f.scalar = little_endian(take(4));
        break;
      default:
        fail("wire type " + std::to_string(f.wire) + " (groups or invalid)");
    }
    return f;
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(where_ + ": " + what + " at byte " + std::to_string(pos_) +
                             " of the message");
  }

 private:
  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= data_.size()) fail("truncated varint");
      const auto b = static_cast<unsigned char>(data_[pos_++]);
      v |= static_cast<std::uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) return v;
    }
    fail("varint longer than 10 bytes");
  }
  std::string_view take(std::uint64_t n) {
    if (n > data_.size() - pos_) fail("length " + std::to_string(n) + " past the end");
    std::string_view out = data_.substr(pos_, n);
    pos_ += n;
    return out;
  }

  std::string_view data_;
  std::string where_;
  std::size_t pos_ = 0;
};

inline void expect_wire(const Parser& p, const Field& f, std::uint32_t wire, const char* name) {
  if (f.wire != wire) {
    p.fail(std::string(name) + " (field " + std::to_string(f.number) + ") has wire type " +
           std::to_string(f.wire) + ", expected " + std::to_string(wire));
  }
}

inline double as_double(std::uint64_t bits) { return std::bit_cast<double>(bits); }

inline void read_doubles(const Parser& p, const Field& f, std::vector<double>& out) {
  if (f.wire == 1) {  // unpacked repeated
    out.push_back(as_double(f.scalar));
    return;
  }
  expect_wire(p, f, 2, "packed doubles");
  if (f.bytes.size() % 8 != 0)
    p.fail("packed doubles of " + std::to_string(f.bytes.size()) + " bytes");
  for (std::size_t i = 0; i < f.bytes.size(); i += 8) {
    out.push_back(as_double(little_endian(f.bytes.substr(i, 8))));
  }
}

inline ReadHistogram parse_histogram(std::string_view data, const std::string& where) {
  Parser p(data, where + " HistogramProto");
  ReadHistogram h;
  while (!p.done()) {
    const Field f = p.next();
    double* field = nullptr;
    switch (f.number) {
      case 1:
        field = &h.min;
        break;
      case 2:
        field = &h.max;
        break;
      case 3:
        field = &h.num;
        break;
      case 4:
        field = &h.sum;
        break;
      case 5:
        field = &h.sum_squares;
        break;
      case 6:
        read_doubles(p, f, h.bucket_limit);
        continue;
      case 7:
        read_doubles(p, f, h.bucket);
        continue;
      default:
        p.fail("unknown HistogramProto field " + std::to_string(f.number));
    }
    expect_wire(p, f, 1, "HistogramProto double");
    *field = as_double(f.scalar);
  }
  if (h.bucket_limit.size() != h.bucket.size()) {
    p.fail(std::to_string(h.bucket_limit.size()) + " bucket limits but " +
           std::to_string(h.bucket.size()) + " buckets");
  }
  return h;
}

inline ReadValue parse_value(std::string_view data, const std::string& where, ReadEvent& event) {
  Parser p(data, where + " Summary.Value");
  ReadValue v;
  while (!p.done()) {
    const Field f = p.next();
    if (f.number == 1) {
      expect_wire(p, f, 2, "tag");
      v.tag = std::string(f.bytes);
    } else if (f.number == 2) {
      expect_wire(p, f, 5, "simple_value");
      v.simple_value = std::bit_cast<float>(static_cast<std::uint32_t>(f.scalar));
    } else if (f.number == 5) {
      expect_wire(p, f, 2, "histo");
      v.histo = parse_histogram(f.bytes, where);
    } else {
      ++event.unknown_fields;
    }
  }
  if (v.tag.empty()) p.fail("a Summary.Value without a tag");
  if (v.simple_value.has_value() == v.histo.has_value()) {
    p.fail("Summary.Value '" + v.tag + "' has " + (v.histo ? "both" : "neither") +
           " simple_value and histo");
  }
  return v;
}

inline ReadEvent parse_event(std::string_view data, const std::string& where) {
  Parser p(data, where + " Event");
  ReadEvent e;
  bool has_wall_time = false;
  while (!p.done()) {
    const Field f = p.next();
    switch (f.number) {
      case 1:
        expect_wire(p, f, 1, "wall_time");
        e.wall_time = as_double(f.scalar);
        has_wall_time = true;
        break;
      case 2:
        expect_wire(p, f, 0, "step");
        e.step = static_cast<std::int64_t>(f.scalar);
        break;
      case 3:
        expect_wire(p, f, 2, "file_version");
        e.file_version = std::string(f.bytes);
        break;
      case 5: {
        expect_wire(p, f, 2, "summary");
        e.has_summary = true;
        Parser s(f.bytes, where + " Summary");
        while (!s.done()) {
          const Field v = s.next();
          if (v.number != 1) {
            ++e.unknown_fields;
            continue;
          }
          expect_wire(s, v, 2, "Summary.value");
          e.values.push_back(parse_value(v.bytes, where, e));
        }
        break;
      }
      default:
        ++e.unknown_fields;
    }
  }
  if (!has_wall_time) p.fail("an Event without wall_time");
  if (e.file_version.has_value() && e.has_summary) p.fail("both file_version and summary");
  return e;
}

}  // namespace event_reader_detail

// Every record of one file, in order.
inline std::vector<ReadEvent> read_event_file(const std::string& path) {
  using namespace event_reader_detail;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string_view all(bytes);
  std::vector<ReadEvent> events;
  std::size_t pos = 0;
  while (pos < all.size()) {
    const std::string where =
        path + " record " + std::to_string(events.size()) + " (byte " + std::to_string(pos) + ")";
    if (all.size() - pos < 12) throw std::runtime_error(where + ": truncated header");
    const std::string_view length_bytes = all.substr(pos, 8);
    const std::uint64_t length = little_endian(length_bytes);
    if (little_endian(all.substr(pos + 8, 4)) != reader_masked_crc32c(length_bytes)) {
      throw std::runtime_error(where + ": failed header crc32 check");
    }
    if (length > all.size() - pos - 12 || all.size() - pos - 12 - length < 4) {
      throw std::runtime_error(where + ": truncated data (length " + std::to_string(length) + ")");
    }
    const std::string_view data = all.substr(pos + 12, length);
    if (little_endian(all.substr(pos + 12 + length, 4)) != reader_masked_crc32c(data)) {
      throw std::runtime_error(where + ": failed event crc32 check");
    }
    events.push_back(parse_event(data, where));
    pos += 12 + length + 4;
  }
  return events;
}

// The event files of a directory ("tfevents" in the name, as TensorBoard finds them),
// sorted by name (creation order within a second and process).
inline std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> files;
  if (!std::filesystem::is_directory(dir)) return files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.is_regular_file() &&
        entry.path().filename().string().find("tfevents") != std::string::npos) {
      files.push_back(entry.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

// (step, value) of every simple_value tagged `tag`, in file order.
inline std::vector<std::pair<std::int64_t, float>> scalars(const std::vector<ReadEvent>& events,
                                                           const std::string& tag) {
  std::vector<std::pair<std::int64_t, float>> out;
  for (const ReadEvent& e : events) {
    for (const ReadValue& v : e.values) {
      if (v.tag == tag && v.simple_value) out.emplace_back(e.step, *v.simple_value);
    }
  }
  return out;
}

// The distinct tags of the events, sorted.
inline std::vector<std::string> tags(const std::vector<ReadEvent>& events) {
  std::vector<std::string> out;
  for (const ReadEvent& e : events) {
    for (const ReadValue& v : e.values) out.push_back(v.tag);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace kolo::testing
