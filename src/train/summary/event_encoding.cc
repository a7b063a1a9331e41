// Hand-written protobuf encoding of the event file messages (see event_encoding.h).
// Wire format: a field is a varint key (field_number << 3 | wire_type) and its value;
// wire types used here: 0 varint, 1 fixed 64 bits, 2 length-delimited, 5 fixed 32 bits.
#include "train/summary/event_encoding.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>

#include "common/coding.h"
#include "kolo/train/summary.h"

namespace kolo::train::events {
namespace {

enum WireType : std::uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// Varints and fixed-width values in common/coding.h's forms (protobuf's are the same:
// LEB128, little-endian).
void put_varint(std::string& out, std::uint64_t v) { coding::put_varint(&out, v); }

void put_key(std::string& out, std::uint32_t field, WireType type) {
  put_varint(out, (static_cast<std::uint64_t>(field) << 3) | type);
}

void put_double(std::string& out, std::uint32_t field, double v) {
  put_key(out, field, kFixed64);
  coding::put(&out, v);
}

void put_float(std::string& out, std::uint32_t field, float v) {
  put_key(out, field, kFixed32);
  coding::put(&out, v);
}

void put_bytes(std::string& out, std::uint32_t field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}

void put_packed_doubles(std::string& out, std::uint32_t field, const std::vector<double>& v) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, 8 * v.size());
  for (double d : v) coding::put(&out, d);
}

// Event{wall_time = 1, step = 2, <what>}; `what` is the already keyed oneof field.
std::string event(double wall_time, std::int64_t step, std::string_view what) {
  std::string out;
  put_double(out, 1, wall_time);
  if (step != 0) {
    put_key(out, 2, kVarint);
    put_varint(out, static_cast<std::uint64_t>(step));  // int64: two's complement
  }
  out.append(what);
  return out;
}

// Event.summary (5) holding Summary{value (1): Value{tag = 1, <value>}}.
std::string summary_event(const std::string& tag, std::string_view value, std::int64_t step,
                          double wall_time) {
  std::string v;
  put_bytes(v, 1, tag);
  v.append(value);
  std::string summary;
  put_bytes(summary, 1, v);
  std::string what;
  put_bytes(what, 5, summary);
  return event(wall_time, step, what);
}

std::vector<double> make_default_bucket_limits() {
  std::vector<double> positive;
  for (double v = 1e-12; v < 1e20; v *= 1.1) positive.push_back(v);
  positive.push_back(DBL_MAX);
  std::vector<double> limits;
  limits.reserve(2 * positive.size() + 1);
  for (auto it = positive.rbegin(); it != positive.rend(); ++it) limits.push_back(-*it);
  limits.push_back(0.0);
  limits.insert(limits.end(), positive.begin(), positive.end());
  return limits;
}

}  // namespace

const std::vector<double>& default_bucket_limits() {
  static const std::vector<double> limits = make_default_bucket_limits();
  return limits;
}

Histogram make_histogram(const std::vector<double>& values) {
  const std::vector<double>& limits = default_bucket_limits();
  std::vector<double> counts(limits.size(), 0.0);
  Histogram h;
  for (double v : values) {
    if (!std::isfinite(v)) continue;
    // The first edge above v closes v's bucket; DBL_MAX itself belongs to the last one.
    auto at = std::upper_bound(limits.begin(), limits.end(), v) - limits.begin();
    counts[std::min<std::size_t>(at, limits.size() - 1)] += 1;
    // min and max each on their own (not else-if): the first value sets both.
    h.min = h.num == 0 ? v : std::min(h.min, v);
    h.max = h.num == 0 ? v : std::max(h.max, v);
    h.num += 1;
    h.sum += v;
    h.sum_squares += v * v;
  }
  for (std::size_t i = 0; i < counts.size();) {
    double limit = limits[i];
    double count = counts[i];
    ++i;
    if (count == 0) {
      while (i < counts.size() && counts[i] == 0) limit = limits[i++];
    }
    h.bucket_limit.push_back(limit);
    h.bucket.push_back(count);
  }
  return h;
}

std::string file_version_event(double wall_time) {
  std::string what;
  put_bytes(what, 3, "brain.Event:2");
  return event(wall_time, 0, what);
}

std::string scalar_event(const std::string& tag, float value, std::int64_t step, double wall_time) {
  std::string v;
  put_float(v, 2, value);  // simple_value, written even when 0: it is a oneof member
  return summary_event(tag, v, step, wall_time);
}

std::string histogram_event(const std::string& tag, const Histogram& histogram, std::int64_t step,
                            double wall_time) {
  // proto3 leaves out a zero (all bits 0) double; so does this, so the bytes are the
  // ones protobuf itself would write.
  std::string proto;
  const double fields[] = {histogram.min, histogram.max, histogram.num, histogram.sum,
                           histogram.sum_squares};
  for (std::uint32_t i = 0; i < 5; ++i) {
    if (std::bit_cast<std::uint64_t>(fields[i]) != 0) put_double(proto, i + 1, fields[i]);
  }
  put_packed_doubles(proto, 6, histogram.bucket_limit);
  put_packed_doubles(proto, 7, histogram.bucket);
  std::string v;
  put_bytes(v, 5, proto);  // Value.histo
  return summary_event(tag, v, step, wall_time);
}

std::string record(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  coding::put_fixed(&out, data.size(), 8);
  coding::put_fixed(&out, masked_crc32c(out.data(), 8), 4);
  out.append(data);
  coding::put_fixed(&out, masked_crc32c(data.data(), data.size()), 4);
  return out;
}

}  // namespace kolo::train::events
