// The shm transport's allreduce with ranks as threads of one process (shm_test_util.h):
// every dtype and op of the copy path with chunking, the zero-copy path and ranks mixing
// them, and allreduce_pieces against packing with every scaling, each against a sequential
// reduce_into reference, and that no /dev/shm/kolo-* file remains.
//
// Not for: broadcast, control_and, subsets, failures, the segment and the selection policy
// (shm_test.cc); real processes, kill -9 and mpirun (kolo_shm_check,
// tests/transport/shm_check.cc).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/reduce.h"
#include "common/testing/elements.h"
#include "transport/shm/shm_communicator.h"
#include "transport/shm/shm_test_util.h"

namespace kolo::transport {
namespace {

using testing::in;
using testing::kolo_segments;
using testing::on_shm_ranks;

// KOLO_TEST_QUICK=1 (the sanitizer runs): the large allreduces shrink 8 times together
// with their regions (128 KiB), so they still take the same several chunks; every dtype,
// op, scaling and path is still run (regions of kSmallBytes, as with 16, would make every
// chunk a small one). Under ASan the four pieces tests took 84 s of the unit tests' 467
// without it (docs/ci.md).
std::size_t quick_divisor() {
  const char* quick = std::getenv("KOLO_TEST_QUICK");
  return quick && std::string(quick) == "1" ? 8 : 1;
}

ShmOptions chunking_regions() {
  ShmOptions o;
  o.region_bytes = (std::size_t{1} << 20) / quick_divisor();
  return o;
}

constexpr const auto& kDtypes = kolo::testing::kEveryDtype;
constexpr const auto& kOps = kolo::testing::kTransportOps;

// Rank r's input: small integers, so every reduction is exact in every dtype.
std::vector<std::uint8_t> input(int rank, DataType dtype, std::size_t count) {
  const std::size_t es = dtype_size(dtype);
  std::vector<std::uint8_t> b(count * es);
  for (std::size_t i = 0; i < count; ++i) {
    const int v = static_cast<int>((i * 7 + static_cast<std::size_t>(rank) * 3) % 5) - 2;
    kolo::testing::store_small(b.data(), dtype, i, v);
  }
  return b;
}

std::vector<std::uint8_t> reference(int n, DataType dtype, ReduceOp op, std::size_t count) {
  std::vector<std::uint8_t> want = input(0, dtype, count);
  for (int r = 1; r < n; ++r)
    reduce_into(want.data(), input(r, dtype, count).data(), count, dtype, op);
  return want;
}

enum class Path { kCopy, kZeroCopy, kMixed };

void check_allreduce(int n, Path path) {
  const std::set<std::string> before = kolo_segments();
  // 1 MiB regions: 300000 elements of 4+ bytes take several chunks (quick: an 8th of both).
  const std::size_t counts[] = {0, 1, 7, 1000, 300000 / quick_divisor()};
  on_shm_ranks(n, chunking_regions(), [&](int rank, std::unique_ptr<Communicator>& comm) {
    for (DataType dtype : kDtypes) {
      for (ReduceOp op : kOps) {
        for (std::size_t count : counts) {
          const std::size_t bytes = count * dtype_size(dtype);
          const bool zero_copy = path == Path::kZeroCopy || (path == Path::kMixed && rank % 2 == 0);
          void* region = comm->fusion_buffer(bytes);
          if (path != Path::kCopy && region == nullptr) continue;  // every rank skips it
          std::vector<std::uint8_t> data = input(rank, dtype, count);
          void* buf = zero_copy ? region : data.data();
          if (zero_copy && bytes > 0) std::memcpy(region, data.data(), bytes);
          const Status s = comm->allreduce(buf, count, dtype, op, in(30));
          ASSERT_TRUE(s.ok()) << s.to_string();
          if (zero_copy && bytes > 0) std::memcpy(data.data(), region, bytes);
          ASSERT_EQ(data, reference(n, dtype, op, count))
              << "rank " << rank << " " << dtype_name(dtype) << " " << reduce_op_name(op)
              << " count " << count;
        }
      }
    }
  });
  EXPECT_EQ(kolo_segments(), before) << "a /dev/shm/kolo-* segment was left behind";
}

TEST(ShmAllreduceTest, CopyPathMatchesSequentialReferenceOnThreeRanks) {
  check_allreduce(3, Path::kCopy);
}
TEST(ShmAllreduceTest, ZeroCopyPathMatchesSequentialReferenceOnFourRanks) {
  check_allreduce(4, Path::kZeroCopy);
}
TEST(ShmAllreduceTest, RanksMayMixZeroCopyAndCopyPaths) { check_allreduce(3, Path::kMixed); }
TEST(ShmAllreduceTest, TwoRanks) { check_allreduce(2, Path::kCopy); }

// A region that holds several copy-path chunks (8 MiB regions; 3 ranks: chunks of
// 16 MiB / 3): rank 0 reduces in its region (as a joined rank or a packed fusion buffer
// does), rank 1 through the copy path, rank 2 through allreduce_pieces, in the same
// collectives. Before the paths cut the same chunks, the region path ran two barriers for
// the whole buffer while the others ran two per chunk.
TEST(ShmAllreduceTest, RanksMayMixPathsWhenARegionHoldsSeveralChunks) {
  ShmOptions options;
  options.region_bytes = std::size_t{8} << 20;
  on_shm_ranks(3, options, [&](int rank, std::unique_ptr<Communicator>& comm) {
    for (DataType dtype : {DataType::kFloat32, DataType::kInt64, DataType::kFloat16}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        const std::size_t es = dtype_size(dtype);
        const std::size_t count = ((std::size_t{7} << 20) + 12345) / es;  // 2 chunks
        std::vector<std::uint8_t> data = input(rank, dtype, count);
        Status s;
        if (rank == 0) {
          void* region = comm->fusion_buffer(count * es);
          ASSERT_NE(region, nullptr);
          std::memcpy(region, data.data(), count * es);
          s = comm->allreduce(region, count, dtype, op, in(30));
          std::memcpy(data.data(), region, count * es);
        } else if (rank == 1) {
          s = comm->allreduce(data.data(), count, dtype, op, in(30));
        } else {
          const std::size_t first = count / 3;
          s = comm->allreduce_pieces({{.in = data.data(), .out = data.data(), .count = first},
                                      {.in = data.data() + first * es,
                                       .out = data.data() + first * es,
                                       .count = count - first}},
                                     dtype, op, in(30));
        }
        ASSERT_TRUE(s.ok()) << "rank " << rank << ": " << s.to_string();
        ASSERT_EQ(data, reference(3, dtype, op, count))
            << "rank " << rank << " " << dtype_name(dtype) << " " << reduce_op_name(op);
      }
    }
  });
}

// The copy path streams a buffer larger than one chunk through the start of the region
// (3 ranks, 8 MiB regions: chunks of 16 MiB / 3), so a buffer that fits the region does
// not spread over all of it (the cache footprint of the 16-64 MiB allreduces). Before,
// chunk [off, off + m) lay at `off` whenever the buffer fitted the region.
TEST(ShmAllreduceTest, CopyPathReusesTheRegionsFirstChunk) {
  ShmOptions options;
  options.region_bytes = std::size_t{8} << 20;
  on_shm_ranks(3, options, [&](int rank, std::unique_ptr<Communicator>& comm) {
    const DataType dtype = DataType::kFloat32;
    const std::size_t count = (std::size_t{7} << 20) / 4;  // 2 chunks
    auto* region = static_cast<unsigned char*>(comm->fusion_buffer(options.region_bytes));
    ASSERT_NE(region, nullptr);
    std::memset(region, 0xAB, options.region_bytes);
    ASSERT_TRUE(comm->barrier(in(30)).ok());  // no rank writes a region before it is filled
    std::vector<std::uint8_t> data = input(rank, dtype, count);
    const Status s = comm->allreduce(data.data(), count, dtype, ReduceOp::kSum, in(30));
    ASSERT_TRUE(s.ok()) << "rank " << rank << ": " << s.to_string();
    ASSERT_EQ(data, reference(3, dtype, ReduceOp::kSum, count)) << "rank " << rank;
    const std::size_t untouched_from = std::size_t{6} << 20;  // past the first chunk
    const auto first_written = std::find_if(region + untouched_from, region + options.region_bytes,
                                            [](unsigned char b) { return b != 0xAB; });
    EXPECT_EQ(first_written, region + options.region_bytes)
        << "rank " << rank << ": the copy path wrote region byte " << (first_written - region)
        << ", past its first chunk";
  });
}

// allreduce_pieces against packing: the pieces' concatenation, prescaled, reduced, then
// postscaled and divided, is what every rank gets, bit for bit; pieces in place and not,
// empty ones, several chunks (1 MiB regions), the last of them small (one barrier) for
// 4- and 8-byte dtypes, a single chunk for the others. With `mixed`, odd ranks take the packed path
// (pack into fusion_buffer() with the prescale, allreduce, unpack with the postscale) in
// the same collectives, as a joined rank does.
void check_pieces(int n, bool mixed) {
  const std::set<std::string> before = kolo_segments();
  const std::size_t q = quick_divisor();  // 120000 and 148944 divide by 8
  // 269998 elements: 4-byte dtypes take a 1 MiB chunk and 31416 bytes (7616 quick).
  const std::size_t sizes[] = {0, 1, 13, 1000, 0, 7, 120000 / q, 33, 148944 / q};
  struct Scaling {
    double prescale, postscale, divisor;
  };
  const Scaling scalings[] = {{1, 1, 1}, {2, 1, 3}, {1, 0.5, 1}};
  on_shm_ranks(n, chunking_regions(), [&](int rank, std::unique_ptr<Communicator>& comm) {
    ASSERT_TRUE(comm->reduces_pieces());
    for (DataType dtype : kDtypes) {
      const std::size_t es = dtype_size(dtype);
      for (ReduceOp op : kOps) {
        for (const Scaling& sc : scalings) {
          if (dtype == DataType::kBool &&
              (sc.prescale != 1 || sc.postscale != 1 || sc.divisor != 1))
            continue;  // bool is never scaled
          // One input per piece, cut from one long input; odd pieces out of place.
          std::size_t total = 0;
          for (std::size_t c : sizes) total += c;
          const std::vector<std::uint8_t> whole = input(rank, dtype, total);
          std::vector<std::vector<std::uint8_t>> ins, outs;
          std::vector<AllreducePiece> pieces;
          std::size_t at = 0;
          for (std::size_t k = 0; k < std::size(sizes); ++k) {
            ins.emplace_back(whole.begin() + at * es, whole.begin() + (at + sizes[k]) * es);
            outs.emplace_back(sizes[k] * es, 0xEE);
            at += sizes[k];
          }
          for (std::size_t k = 0; k < std::size(sizes); ++k) {
            void* out = k % 2 ? outs[k].data() : ins[k].data();
            pieces.push_back({.in = ins[k].data(),
                              .out = out,
                              .count = sizes[k],
                              .prescale = sc.prescale,
                              .postscale = sc.postscale,
                              .divisor = sc.divisor});
          }
          if (mixed && rank % 2 == 1) {
            // Packed, in region-sized chunks of the concatenation.
            std::vector<std::uint8_t> all(total * es);
            scale_into(all.data(), whole.data(), total, dtype, sc.prescale);
            const std::size_t chunk = chunking_regions().region_bytes / es;
            for (std::size_t off = 0; off < total; off += chunk) {
              const std::size_t m = std::min(chunk, total - off);
              void* region = comm->fusion_buffer(m * es);
              ASSERT_NE(region, nullptr);
              std::memcpy(region, all.data() + off * es, m * es);
              const Status s = comm->allreduce(region, m, dtype, op, in(30));
              ASSERT_TRUE(s.ok()) << s.to_string();
              scale_into(all.data() + off * es, region, m, dtype, sc.postscale, sc.divisor);
            }
            at = 0;
            for (std::size_t k = 0; k < std::size(sizes); ++k) {
              if (sizes[k] > 0) std::memcpy(pieces[k].out, all.data() + at * es, sizes[k] * es);
              at += sizes[k];
            }
          } else {
            const Status s = comm->allreduce_pieces(pieces, dtype, op, in(30));
            ASSERT_TRUE(s.ok()) << s.to_string();
          }
          // The reference: every rank's prescaled input folded in rank order, then scaled.
          std::vector<std::uint8_t> want(total * es);
          scale_into(want.data(), input(0, dtype, total).data(), total, dtype, sc.prescale);
          std::vector<std::uint8_t> theirs(total * es);
          for (int r = 1; r < n; ++r) {
            scale_into(theirs.data(), input(r, dtype, total).data(), total, dtype, sc.prescale);
            reduce_into(want.data(), theirs.data(), total, dtype, op);
          }
          scale(want.data(), total, dtype, sc.postscale, sc.divisor);
          at = 0;
          for (std::size_t k = 0; k < std::size(sizes); ++k) {
            const auto* got = static_cast<const std::uint8_t*>(pieces[k].out);
            ASSERT_TRUE(std::equal(got, got + sizes[k] * es, want.begin() + at * es))
                << "rank " << rank << " " << dtype_name(dtype) << " " << reduce_op_name(op)
                << " piece " << k << " scaling " << sc.prescale << "/" << sc.postscale << "/"
                << sc.divisor;
            at += sizes[k];
          }
        }
      }
    }
  });
  EXPECT_EQ(kolo_segments(), before) << "a /dev/shm/kolo-* segment was left behind";
}

TEST(ShmAllreducePiecesTest, MatchesPackingOnTwoRanks) { check_pieces(2, false); }
TEST(ShmAllreducePiecesTest, MatchesPackingOnThreeRanks) { check_pieces(3, false); }
TEST(ShmAllreducePiecesTest, RanksMayMixPiecesAndPacking) { check_pieces(3, true); }
TEST(ShmAllreducePiecesTest, OneRankScalesIntoTheOutputs) { check_pieces(1, false); }

}  // namespace
}  // namespace kolo::transport
