// The bytes of TensorBoard event files: TFRecord framing and the few protobuf fields of
// Event, Summary, Summary.Value and HistogramProto that SummaryWriter writes, encoded by
// hand (field numbers from tensorboard/compat/proto/{event,summary,histogram}.proto),
// and TensorFlow's default histogram buckets.
//
// Why by hand and not with libprotobuf: the library is installed but protoc is not, and
// generated code would need it at build time plus copies of the .proto files, for a
// handful of fields (wall_time, step, file_version, summary; tag, simple_value, histo;
// the histogram's seven). docs/dependencies.md says the same.
//
// Not for: reading event files (the tests' reader, testing/event_reader.h, is
// independent of this code), files on disk (summary.cc), or any other proto field.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kolo::train::events {

// HistogramProto's fields. bucket[i] counts the values in [bucket_limit[i-1],
// bucket_limit[i]) (bucket 0 from -DBL_MAX).
struct Histogram {
  double min = 0;
  double max = 0;
  double num = 0;
  double sum = 0;
  double sum_squares = 0;
  std::vector<double> bucket_limit;
  std::vector<double> bucket;
};

// TensorFlow's default bucket edges (tensorflow/core/lib/histogram/histogram.cc): the
// positive edges 1e-12 * 1.1^k below 1e20, then DBL_MAX; the same negated below 0, and 0.
// Ascending, from -DBL_MAX to DBL_MAX.
const std::vector<double>& default_bucket_limits();

// The histogram of the finite values of `values` over the default edges, runs of empty
// buckets merged into one as TensorFlow's EncodeToProto does. NaN and +-inf are left out
// (TensorFlow's histogram op refuses them and TensorBoard cannot draw them): min, max,
// num, sum and sum_squares are those of the finite values. No finite value: all zero,
// one empty bucket up to DBL_MAX.
Histogram make_histogram(const std::vector<double>& values);

// Serialized Event messages. wall_time in seconds since the epoch; a step of 0 is left
// out, as protobuf does for a default value.
std::string file_version_event(double wall_time);  // file_version "brain.Event:2"
std::string scalar_event(const std::string& tag, float value, std::int64_t step, double wall_time);
std::string histogram_event(const std::string& tag, const Histogram& histogram, std::int64_t step,
                            double wall_time);

// One TFRecord: u64 length, masked CRC-32C of those 8 bytes, the data, masked CRC-32C of
// the data (all little-endian).
std::string record(std::string_view data);

}  // namespace kolo::train::events
