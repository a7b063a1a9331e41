// ElasticSampler (kolo/elastic.h): an epoch's shards over a set of workers that may change
// during the epoch, without repeating or skipping an index.
//
// The invariant: every rank holds the same processed set and the same list of the epoch's
// other indices (`order`, fixed at the last reshard), so each rank knows every rank's
// shard (order[r], order[r + W], ...) without asking. A rank's progress is then one
// number, its recorded prefix of its shard; save_progress() allgathers those numbers and
// each rank marks every rank's new prefix in its own copy of the processed set, which
// stays equal everywhere. A reshard after the workers changed starts a new list from the
// processed set as saved (or as root sent it). Not here: which rank's state wins a sync
// (State::sync in elastic.cc) and loading the data (the DataLoader).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kolo/elastic.h"
#include "permutation.h"

namespace kolo {

struct ElasticSampler::Shared {
  // What identifies the sequence of epochs: every rank's sampler must agree on these.
  std::int64_t size = 0;
  bool shuffle = true;
  std::uint64_t seed = 0;

  std::int64_t epoch = 0;
  std::vector<std::uint8_t> processed;  // per index: 1 once some rank's saved prefix holds it
  std::int64_t processed_count = 0;
  std::vector<std::int64_t> order;  // the epoch's unprocessed indices at the last reshard
  int replicas = 1, rank = 0;
  std::int64_t recorded = 0;         // this rank's samples recorded since the reshard
  std::vector<std::int64_t> marked;  // per rank: its prefix already in `processed`
  std::int64_t served = 0;           // next()'s position in this rank's shard

  std::int64_t saved_epoch = 0;
  std::vector<std::uint8_t> saved_processed;
  std::int64_t saved_count = 0;

  std::int64_t shard_size(int r) const {
    const auto n = static_cast<std::int64_t>(order.size());
    return n / replicas + (r < n % replicas ? 1 : 0);
  }
  std::int64_t shard_index(int r, std::int64_t k) const {
    return order[static_cast<std::size_t>(r + k * replicas)];
  }
};

namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, "ElasticSampler: " + message);
}

// progress(): five int64 fields, then the processed set as bits, index i at bit i % 8 of
// byte i / 8. The ranks of one job run the same build on the same kind of machine, so the
// integers travel in host byte order.
constexpr std::int64_t kMagic = 0x6b6f6c6f45530001;  // "koloES" and a version
constexpr std::size_t kHeader = 5 * sizeof(std::int64_t);

void put(std::string& out, std::int64_t v) {
  char b[sizeof v];
  std::memcpy(b, &v, sizeof v);
  out.append(b, sizeof v);
}

std::int64_t get(const std::string& in, std::size_t field) {
  std::int64_t v;
  std::memcpy(&v, in.data() + field * sizeof v, sizeof v);
  return v;
}

}  // namespace

ElasticSampler::ElasticSampler(std::int64_t dataset_size, bool shuffle, std::uint64_t seed)
    : shared_(std::make_shared<Shared>()) {
  if (dataset_size < 0) invalid("dataset_size must be >= 0, got " + std::to_string(dataset_size));
  Shared& s = *shared_;
  s.size = dataset_size;
  s.shuffle = shuffle;
  s.seed = seed;
  s.processed.assign(static_cast<std::size_t>(dataset_size), 0);
  s.saved_processed = s.processed;
  const bool up = kolo::is_initialized();
  reshard(up ? kolo::size() : 1, up ? kolo::rank() : 0);
}

void ElasticSampler::set_epoch(std::int64_t epoch) {
  Shared& s = *shared_;
  if (epoch == s.epoch) return;
  s.epoch = epoch;
  std::fill(s.processed.begin(), s.processed.end(), 0);
  s.processed_count = 0;
  reshard(s.replicas, s.rank);
}

std::int64_t ElasticSampler::epoch() const { return shared_->epoch; }

void ElasticSampler::record_batch(std::int64_t n) {
  Shared& s = *shared_;
  if (n < 0) invalid("record_batch: n must be >= 0, got " + std::to_string(n));
  const std::int64_t shard = s.shard_size(s.rank);
  if (s.recorded + n > shard) {
    invalid("record_batch(" + std::to_string(n) + ") on rank " + std::to_string(s.rank) +
            ": its shard of epoch " + std::to_string(s.epoch) + " holds " + std::to_string(shard) +
            " samples and " + std::to_string(s.recorded) +
            " are recorded already; record each batch once, with the number of samples "
            "next() gave for it");
  }
  s.recorded += n;
}

std::int64_t ElasticSampler::recorded() const { return shared_->recorded; }

std::vector<std::int64_t> ElasticSampler::indices() const {
  const Shared& s = *shared_;
  std::vector<std::int64_t> out(static_cast<std::size_t>(s.shard_size(s.rank)));
  for (std::size_t k = 0; k < out.size(); ++k)
    out[k] = s.shard_index(s.rank, static_cast<std::int64_t>(k));
  return out;
}

std::int64_t ElasticSampler::shard_size() const { return shared_->shard_size(shared_->rank); }
int ElasticSampler::num_replicas() const { return shared_->replicas; }
int ElasticSampler::rank() const { return shared_->rank; }
std::int64_t ElasticSampler::remaining() const { return shared_->size - shared_->processed_count; }

std::int64_t ElasticSampler::common_batches(std::int64_t batch_size) const {
  if (batch_size < 1)
    invalid("common_batches: batch_size must be >= 1, got " + std::to_string(batch_size));
  const Shared& s = *shared_;
  const std::int64_t smallest = static_cast<std::int64_t>(s.order.size()) / s.replicas;
  return (smallest + batch_size - 1) / batch_size;
}

void ElasticSampler::reshard(int num_replicas, int rank) {
  if (num_replicas < 1) invalid("num_replicas must be >= 1, got " + std::to_string(num_replicas));
  if (rank < 0 || rank >= num_replicas) {
    invalid("rank must be in [0, " + std::to_string(num_replicas) + "), got " +
            std::to_string(rank));
  }
  Shared& s = *shared_;
  std::vector<std::int64_t> order = data::epoch_order(s.size, s.shuffle, s.seed, s.epoch);
  order.erase(std::remove_if(order.begin(), order.end(),
                             [&](std::int64_t i) { return s.processed[i] != 0; }),
              order.end());
  s.order = std::move(order);
  s.replicas = num_replicas;
  s.rank = rank;
  s.recorded = 0;
  s.marked.assign(static_cast<std::size_t>(num_replicas), 0);
  s.served = 0;
}

void ElasticSampler::save_progress(const std::vector<std::int64_t>& recorded_by_rank) {
  Shared& s = *shared_;
  if (recorded_by_rank.size() != static_cast<std::size_t>(s.replicas)) {
    invalid("save_progress: " + std::to_string(recorded_by_rank.size()) +
            " ranks' counts for a sampler sharded over " + std::to_string(s.replicas) +
            " ranks; after the workers changed, sync_progress() (TorchState::sync) reshards "
            "over the new ones");
  }
  if (recorded_by_rank[s.rank] != s.recorded) {
    invalid("save_progress: the counts say rank " + std::to_string(s.rank) + " recorded " +
            std::to_string(recorded_by_rank[s.rank]) + " samples, it recorded " +
            std::to_string(s.recorded));
  }
  for (int r = 0; r < s.replicas; ++r) {
    const std::int64_t c = recorded_by_rank[r];
    if (c < s.marked[r] || c > s.shard_size(r)) {
      invalid("save_progress: rank " + std::to_string(r) + " recorded " + std::to_string(c) +
              " samples; its shard holds " + std::to_string(s.shard_size(r)) + " and " +
              std::to_string(s.marked[r]) + " were saved already");
    }
  }
  for (int r = 0; r < s.replicas; ++r) {
    for (std::int64_t k = s.marked[r]; k < recorded_by_rank[r]; ++k) {
      s.processed[s.shard_index(r, k)] = 1;
      ++s.processed_count;
    }
    s.marked[r] = recorded_by_rank[r];
  }
  s.saved_epoch = s.epoch;
  s.saved_processed = s.processed;
  s.saved_count = s.processed_count;
}

void ElasticSampler::save_progress() {
  const torch::Tensor all = kolo::allgather(torch::tensor({shared_->recorded}, torch::kLong),
                                            {.name = "elastic_sampler.recorded"});
  std::vector<std::int64_t> counts(static_cast<std::size_t>(all.numel()));
  std::memcpy(counts.data(), all.data_ptr<std::int64_t>(), counts.size() * sizeof(std::int64_t));
  save_progress(counts);
}

void ElasticSampler::restore_progress() {
  Shared& s = *shared_;
  s.epoch = s.saved_epoch;
  s.processed = s.saved_processed;
  s.processed_count = s.saved_count;
  reshard(s.replicas, s.rank);
}

std::string ElasticSampler::progress() const {
  const Shared& s = *shared_;
  std::string out;
  for (std::int64_t v :
       {kMagic, s.size, std::int64_t{s.shuffle}, static_cast<std::int64_t>(s.seed), s.epoch})
    put(out, v);
  std::string bits(static_cast<std::size_t>((s.size + 7) / 8), '\0');
  for (std::int64_t i = 0; i < s.size; ++i)
    if (s.processed[i]) bits[i / 8] = static_cast<char>(bits[i / 8] | (1 << (i % 8)));
  return out + bits;
}

void ElasticSampler::load_progress(const std::string& bytes, int num_replicas, int rank) {
  Shared& s = *shared_;
  if (bytes.size() < kHeader || get(bytes, 0) != kMagic) {
    invalid("load_progress: these " + std::to_string(bytes.size()) +
            " bytes are not an ElasticSampler's progress()");
  }
  const std::int64_t size = get(bytes, 1), shuffle = get(bytes, 2), seed = get(bytes, 3);
  if (size != s.size || shuffle != std::int64_t{s.shuffle} ||
      seed != static_cast<std::int64_t>(s.seed)) {
    invalid("the progress comes from a sampler with dataset size " + std::to_string(size) +
            ", shuffle " + std::to_string(shuffle) + ", seed " + std::to_string(seed) +
            "; this one (rank " + std::to_string(rank) + ") has " + std::to_string(s.size) + ", " +
            std::to_string(int{s.shuffle}) + ", " +
            std::to_string(static_cast<std::int64_t>(s.seed)) +
            "; every worker must build its ElasticSampler with the same dataset size, "
            "shuffle and seed");
  }
  if (bytes.size() != kHeader + static_cast<std::size_t>((size + 7) / 8)) {
    invalid("load_progress: " + std::to_string(bytes.size()) + " bytes for a dataset of " +
            std::to_string(size) + " (truncated?)");
  }
  s.epoch = get(bytes, 4);
  s.processed_count = 0;
  for (std::int64_t i = 0; i < size; ++i) {
    s.processed[i] = (bytes[kHeader + i / 8] >> (i % 8)) & 1;
    s.processed_count += s.processed[i];
  }
  s.saved_epoch = s.epoch;
  s.saved_processed = s.processed;
  s.saved_count = s.processed_count;
  reshard(num_replicas, rank);
}

void ElasticSampler::sync_progress(int root) {
  const std::string bytes = broadcast_object(kolo::rank() == root ? progress() : std::string(),
                                             root, "elastic_sampler.progress");
  load_progress(bytes, kolo::size(), kolo::rank());
}

void ElasticSampler::reset(c10::optional<std::size_t> new_size) {
  Shared& s = *shared_;
  if (new_size && *new_size != static_cast<std::size_t>(s.size)) {
    invalid("reset(" + std::to_string(*new_size) + ") on a sampler of " + std::to_string(s.size) +
            " samples: the dataset size cannot change (build a new sampler)");
  }
  s.served = s.recorded;
}

c10::optional<std::vector<std::size_t>> ElasticSampler::next(std::size_t batch_size) {
  if (batch_size == 0) {
    invalid("next: batch_size must be >= 1, got 0 (check the DataLoaderOptions' batch_size)");
  }
  Shared& s = *shared_;
  const std::int64_t shard = s.shard_size(s.rank);
  if (s.served >= shard) return c10::nullopt;
  const std::int64_t n = std::min(static_cast<std::int64_t>(batch_size), shard - s.served);
  std::vector<std::size_t> batch(static_cast<std::size_t>(n));
  for (std::int64_t k = 0; k < n; ++k)
    batch[k] = static_cast<std::size_t>(s.shard_index(s.rank, s.served + k));
  s.served += n;
  return batch;
}

void ElasticSampler::save(torch::serialize::OutputArchive& archive) const {
  const std::string bytes = progress();
  torch::Tensor t = torch::empty({static_cast<std::int64_t>(bytes.size())}, torch::kByte);
  std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  archive.write("elastic_sampler.progress", t);
}

void ElasticSampler::load(torch::serialize::InputArchive& archive) {
  torch::Tensor t;
  archive.read("elastic_sampler.progress", t);
  t = t.contiguous().to(torch::kByte);
  const std::string bytes(static_cast<const char*>(t.data_ptr()),
                          static_cast<std::size_t>(t.numel()));
  load_progress(bytes, shared_->replicas, shared_->rank);
}

}  // namespace kolo
