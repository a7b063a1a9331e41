// The collectives the shm transport runs in its segment: allreduce, allreduce_pieces,
// broadcast, barrier, control_and.
//
// allreduce: the buffer is reduced in chunks of about kCopyChunkBudget / n bytes (so the
// regions' data is reused while in cache), two barriers each. A rank whose buffer is its
// region (packed into fusion_buffer()) has every chunk in place already, chunk [off,
// off + m) at `off`; any other buffer takes the copy path, which copies each chunk's other
// slices into the start of the region, so a large buffer streams through one chunk's worth
// of cache. In a chunk, rank r reduces its slice (about m/n elements, cut on 64-byte
// boundaries) across all n regions, block by block, and writes each reduced block into
// every rank's region while it is still in cache (a reduce-scatter and an allgather in one
// pass); the copy path reduces its own slice straight from and into the caller's buffer.
// Both paths cut the same chunks, and each rank publishes where its chunk lies in its
// region (RankSlot::chunk_base) before the chunk's first barrier, so ranks may mix them in
// one collective (a joined rank packs the op's identity while the others use
// allreduce_pieces). The reduction folds sources in rank order, so every rank gets the
// same bits as a sequential reduction 0, 1, ..., n-1.
//
// allreduce_pieces is the copy path over a list of tensors (their concatenation is cut
// into chunks): prescale while copying in, postscale/average while copying out and, for
// the own slice, in cache right after the reduction. Regions only ever hold prescaled
// inputs and unscaled sums, so it mixes with the other paths too.
//
// Small chunks (at most kSmallBytes, without a stage: a small allreduce, or the last chunk
// of a larger one) skip all that: each rank copies its (prescaled) part into its slot of
// the small area, one barrier, and every rank reduces all n slots into its outputs, in
// rank order again (the same bits). The choice depends on the chunk alone, so a rank that
// packs a long buffer into region-sized allreduces still meets the others' chunks on the
// same path. Slots alternate between two parities: a rank writes a parity again only after
// the barrier of the chunk in between, which every rank reaches only after it finished
// reading that parity (as in control_and). One barrier instead of two, and no copy back
// out.
//
// allreduce_staged (for the hierarchical transport) splits the one pass in two: the whole
// slice is reduced, a stage runs on it (the cross-host allreduce of that slice), then it
// is copied to the other regions; the barriers are the same.
//
// Not for: bootstrap, delegation to the base communicator (shm_communicator.cc), or the
// barrier itself (shm_sync.cc).
#include <algorithm>
#include <cstring>

#include "common/reduce.h"
#include "transport/shm/shm_internal.h"

namespace kolo::transport::shm {
namespace {

// Bytes reduced per step before they are copied to the other regions: small enough that
// the reduced block is still in L1/L2 when it is copied out.
constexpr std::size_t kBlockBytes = 32 << 10;

// The copy paths move a large buffer in chunks of about this many bytes over all ranks
// (at least 1 MiB each, at most a region), so that what one rank copies into its region is
// still in the last-level cache when another reduces it, and a reduced block when its
// owner copies it out. Measured at 2 ranks (8 MiB chunks): 64-256 MiB allreduces ~3.9 ->
// ~4.5 GB/s against region-sized (64 MiB) chunks.
constexpr std::size_t kCopyChunkBudget = 16 << 20;

bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const auto* pa = static_cast<const char*>(a);
  const auto* pb = static_cast<const char*>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
}

}  // namespace

ShmCommunicator::Slice ShmCommunicator::slice(std::size_t count, std::size_t es, int r) const {
  const int n = size();
  const std::size_t align = 64 / es;
  std::size_t per = (count + n - 1) / n;
  per = (per + align - 1) / align * align;
  const std::size_t lo = std::min(count, per * r);
  return {lo, std::min(count, lo + per)};
}

std::size_t ShmCommunicator::copy_chunk(std::size_t es) const {
  const std::size_t per_rank = std::max<std::size_t>(kMinRegion, kCopyChunkBudget / size());
  return std::min(seg_.region_bytes(), per_rank) / es;
}

bool ShmCommunicator::one_small_chunk(std::size_t count, std::size_t es) const {
  return count * es <= kSmallBytes && count <= copy_chunk(es);
}

Status ShmCommunicator::reduce_regions(std::size_t count, std::size_t base, DataType dtype,
                                       ReduceOp op, const std::vector<OwnSpan>* own,
                                       const SliceStage* stage, Deadline deadline) {
  const int n = size(), me = rank();
  const std::size_t es = dtype_size(dtype);
  at(seg_.slot(me).chunk_base).store(base * es, std::memory_order_relaxed);
  // The barrier orders the stores of chunk_base before every rank's loads below; no rank
  // stores the next chunk's before every rank passed the closing barrier.
  KOLO_RETURN_IF_ERROR(barrier_.sync("allreduce", deadline));
  for (int r = 0; r < n; ++r) {
    chunks_[r] = seg_.region(r) + at(seg_.slot(r).chunk_base).load(std::memory_order_relaxed);
  }
  const Slice mine = slice(count, es, me);
  const std::size_t block = kBlockBytes / es;
  char* const region = seg_.region(me) + base * es;
  OwnSpan in_region{mine.lo, mine.hi, region + mine.lo * es, region + mine.lo * es};
  const OwnSpan* spans = own ? own->data() : &in_region;
  const std::size_t nspans = own ? own->size() : 1;
  // Elements [b, b + m) of the chunk, inside `span`: reduced into the span's output.
  auto reduce_block = [&](const OwnSpan& span, std::size_t b, std::size_t m) {
    char* dst = span.dst + (b - span.lo) * es;
    const char* src = span.src + (b - span.lo) * es;
    if (span.prescale != 1.0) {
      scale_into(dst, src, m, dtype, span.prescale);
      src = dst;
    }
    for (int r = 0; r < n; ++r) srcs_[r] = r == me ? src : chunks_[r] + b * es;
    reduce_many(dst, srcs_.data(), n, m, dtype, op);
    return dst;
  };
  // Regions always receive unscaled results (a rank reducing in its region scales while
  // unpacking), so ranks on different paths can share a collective.
  auto push_block = [&](const char* result, std::size_t b, std::size_t m) {
    for (int r = 0; r < n; ++r) {
      if (r != me) std::memcpy(chunks_[r] + b * es, result, m * es);
    }
  };
  auto post_scale = [&](const OwnSpan& span, char* result, std::size_t m) {
    if (span.postscale != 1.0 || span.divisor != 1.0) {
      scale(result, m, dtype, span.postscale, span.divisor);
    }
  };
  if (stage == nullptr) {
    // Reduce a block, copy it out and scale it while it is still in cache.
    for (std::size_t k = 0; k < nspans; ++k) {
      for (std::size_t b = spans[k].lo; b < spans[k].hi; b += block) {
        const std::size_t m = std::min(block, spans[k].hi - b);
        char* result = reduce_block(spans[k], b, m);
        push_block(result, b, m);
        post_scale(spans[k], result, m);
      }
    }
  } else {
    // Staged: the whole slice is reduced before the stage (a cross-host allreduce) sees it.
    // Only this rank reads or writes the slice's range of any region until the barrier
    // below, so the stage may take as long as it needs.
    if (nspans != 1) return Internal("shm allreduce_staged: the own slice must be one span");
    const OwnSpan& span = spans[0];
    for (std::size_t b = span.lo; b < span.hi; b += block) {
      reduce_block(span, b, std::min(block, span.hi - b));
    }
    const Status s = (*stage)(span.dst, span.hi - span.lo);
    if (!s.ok()) return barrier_.abort(s.message());
    push_block(span.dst, span.lo, span.hi - span.lo);
    post_scale(span, span.dst, span.hi - span.lo);
  }
  return barrier_.sync("allreduce", deadline);
}

Status ShmCommunicator::allreduce(void* buffer, std::size_t count, DataType dtype, ReduceOp op,
                                  Deadline deadline) {
  return allreduce_staged(buffer, count, dtype, op, nullptr, deadline);
}

Status ShmCommunicator::allreduce_staged(void* buffer, std::size_t count, DataType dtype,
                                         ReduceOp op, const SliceStage* stage, Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check("allreduce"));
  if (count == 0) return Status::OK();
  if (size() == 1) return stage ? (*stage)(buffer, count) : Status::OK();
  KOLO_RETURN_IF_ERROR(seg_.wait_regions(deadline));
  const std::size_t es = dtype_size(dtype);
  const std::size_t bytes = count * es;
  char* region = seg_.region(rank());
  const std::size_t region_bytes = seg_.region_bytes();
  if (stage == nullptr && one_small_chunk(count, es) &&
      (buffer == region || !overlaps(buffer, bytes, region, region_bytes))) {
    return small_allreduce({AllreducePiece{.in = buffer, .out = buffer, .count = count}}, dtype, op,
                           deadline);
  }
  if (buffer == region && bytes <= region_bytes) {
    // In place, in the copy path's chunks; chunk [off, off + m) lies at `off`.
    const std::size_t chunk = copy_chunk(es);
    for (std::size_t off = 0; off < count; off += chunk) {
      const std::size_t m = std::min(chunk, count - off);
      if (stage == nullptr && m * es <= kSmallBytes) {
        char* at = region + off * es;
        chunk_pieces_.assign(1, AllreducePiece{.in = at, .out = at, .count = m});
        KOLO_RETURN_IF_ERROR(small_allreduce(chunk_pieces_, dtype, op, deadline));
        continue;
      }
      KOLO_RETURN_IF_ERROR(reduce_regions(m, off, dtype, op, nullptr, stage, deadline));
    }
    return Status::OK();
  }
  if (overlaps(buffer, bytes, region, region_bytes)) {
    return InvalidArgument(
        "shm allreduce: the buffer overlaps this rank's shm region without "
        "being the fusion_buffer() itself (or is larger than it)");
  }
  // Copy path (the buffer as one piece): this rank's own slice never goes through its
  // region; it is reduced from and into `buffer` directly, so only the other ranks' slices
  // are copied in and out ((n-1)/n of the bytes each way).
  return copy_path({AllreducePiece{.in = buffer, .out = buffer, .count = count}}, dtype, op, stage,
                   deadline);
}

Status ShmCommunicator::allreduce_pieces(const std::vector<AllreducePiece>& pieces, DataType dtype,
                                         ReduceOp op, Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check("allreduce"));
  KOLO_RETURN_IF_ERROR(seg_.wait_regions(deadline));
  if (size() == 1) {
    for (const auto& p : pieces) {
      scale_into(p.out, p.in, p.count, dtype, p.prescale);
      scale(p.out, p.count, dtype, p.postscale, p.divisor);
    }
    return Status::OK();
  }
  std::size_t total = 0;
  for (const auto& p : pieces) total += p.count;
  if (total == 0) return Status::OK();  // as allreduce() of nothing: no barrier
  if (one_small_chunk(total, dtype_size(dtype)))
    return small_allreduce(pieces, dtype, op, deadline);
  return copy_path(pieces, dtype, op, nullptr, deadline);
}

Status ShmCommunicator::small_allreduce(const std::vector<AllreducePiece>& pieces, DataType dtype,
                                        ReduceOp op, Deadline deadline) {
  const int n = size(), p = small_parity_;
  small_parity_ ^= 1;
  const std::size_t es = dtype_size(dtype);
  char* to = seg_.small(p, rank());
  for (const auto& piece : pieces) {
    scale_into(to, piece.in, piece.count, dtype, piece.prescale);
    to += piece.count * es;
  }
  KOLO_RETURN_IF_ERROR(barrier_.sync("allreduce", deadline));
  std::size_t at = 0;  // bytes into every slot
  for (const auto& piece : pieces) {
    if (piece.count == 0) continue;
    for (int r = 0; r < n; ++r) srcs_[r] = seg_.small(p, r) + at;
    reduce_many(piece.out, srcs_.data(), n, piece.count, dtype, op);
    if (piece.postscale != 1.0 || piece.divisor != 1.0) {
      scale(piece.out, piece.count, dtype, piece.postscale, piece.divisor);
    }
    at += piece.count * es;
  }
  return Status::OK();
}

// The chunks are cut from the pieces' concatenation; the other ranks' slices are copied
// into the region (prescaled) and out of it (postscaled, in the same pass); this rank's
// slice is reduced from the pieces' inputs straight into their outputs and scaled there
// while in cache.
Status ShmCommunicator::copy_path(const std::vector<AllreducePiece>& pieces, DataType dtype,
                                  ReduceOp op, const SliceStage* stage, Deadline deadline) {
  const std::size_t es = dtype_size(dtype);
  std::vector<std::size_t> starts(pieces.size() + 1, 0);  // element offsets in the concatenation
  for (std::size_t k = 0; k < pieces.size(); ++k) starts[k + 1] = starts[k] + pieces[k].count;
  const std::size_t total = starts.back();
  // Calls fn(piece, offset in the piece, length) for the parts of [begin, end) of the
  // concatenation, in order.
  auto visit = [&](std::size_t begin, std::size_t end, auto&& fn) {
    std::size_t k = static_cast<std::size_t>(std::upper_bound(starts.begin(), starts.end(), begin) -
                                             starts.begin() - 1);
    for (std::size_t at = begin; at < end; ++k) {
      const std::size_t stop = std::min(end, starts[k + 1]);
      if (stop > at) fn(pieces[k], at - starts[k], stop - at);
      at = std::max(at, stop);
    }
  };
  char* region = seg_.region(rank());
  const std::size_t chunk = copy_chunk(es);
  for (std::size_t off = 0; off < total; off += chunk) {
    const std::size_t m = std::min(chunk, total - off);
    if (stage == nullptr && m * es <= kSmallBytes) {
      chunk_pieces_.clear();
      visit(off, off + m, [&](const AllreducePiece& p, std::size_t at, std::size_t len) {
        chunk_pieces_.push_back({.in = static_cast<const char*>(p.in) + at * es,
                                 .out = static_cast<char*>(p.out) + at * es,
                                 .count = len,
                                 .prescale = p.prescale,
                                 .postscale = p.postscale,
                                 .divisor = p.divisor});
      });
      KOLO_RETURN_IF_ERROR(small_allreduce(chunk_pieces_, dtype, op, deadline));
      continue;
    }
    const Slice mine = slice(m, es, rank());
    auto copy_in = [&](std::size_t begin, std::size_t end) {
      char* to = region + (begin - off) * es;
      visit(begin, end, [&](const AllreducePiece& p, std::size_t at, std::size_t len) {
        scale_into(to, static_cast<const char*>(p.in) + at * es, len, dtype, p.prescale);
        to += len * es;
      });
    };
    auto copy_out = [&](std::size_t begin, std::size_t end) {
      const char* from = region + (begin - off) * es;
      visit(begin, end, [&](const AllreducePiece& p, std::size_t at, std::size_t len) {
        scale_into(static_cast<char*>(p.out) + at * es, from, len, dtype, p.postscale, p.divisor);
        from += len * es;
      });
    };
    copy_in(off, off + mine.lo);
    copy_in(off + mine.hi, off + m);
    spans_.clear();
    std::size_t lo = mine.lo;
    visit(off + mine.lo, off + mine.hi,
          [&](const AllreducePiece& p, std::size_t at, std::size_t len) {
            spans_.push_back(OwnSpan{lo, lo + len, static_cast<const char*>(p.in) + at * es,
                                     static_cast<char*>(p.out) + at * es, p.prescale, p.postscale,
                                     p.divisor});
            lo += len;
          });
    if (stage && spans_.empty()) {
      // An empty own slice still runs the stage (every rank, every chunk), at its place in
      // the single piece.
      const std::size_t at = (off + mine.lo) * es;
      spans_.push_back(OwnSpan{mine.lo, mine.hi, static_cast<const char*>(pieces[0].in) + at,
                               static_cast<char*>(pieces[0].out) + at});
    }
    // The chunk lies at the start of this rank's region.
    KOLO_RETURN_IF_ERROR(reduce_regions(m, 0, dtype, op, &spans_, stage, deadline));
    copy_out(off, off + mine.lo);
    copy_out(off + mine.hi, off + m);
  }
  return Status::OK();
}

// Root copies a chunk into its region; barrier; the others copy it out; barrier (so the
// root does not overwrite a chunk someone still reads).
Status ShmCommunicator::broadcast(void* buffer, std::size_t bytes, int root, Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check("broadcast"));
  if (root < 0 || root >= size()) {
    return InvalidArgument("shm broadcast: root " + std::to_string(root) + " is not a rank of " +
                           std::to_string(size()));
  }
  if (bytes == 0 || size() == 1) return Status::OK();
  KOLO_RETURN_IF_ERROR(seg_.wait_regions(deadline));
  char* src = seg_.region(root);
  const std::size_t region = seg_.region_bytes();
  if (overlaps(buffer, bytes, seg_.region(rank()), region)) {
    return InvalidArgument("shm broadcast: the buffer overlaps this rank's shm region");
  }
  auto* data = static_cast<char*>(buffer);
  for (std::size_t off = 0; off < bytes; off += region) {
    const std::size_t m = std::min(region, bytes - off);
    if (rank() == root) std::memcpy(src, data + off, m);
    KOLO_RETURN_IF_ERROR(barrier_.sync("broadcast", deadline));
    if (rank() != root) std::memcpy(data + off, src, m);
    KOLO_RETURN_IF_ERROR(barrier_.sync("broadcast", deadline));
  }
  return Status::OK();
}

Status ShmCommunicator::barrier(Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check("barrier"));
  if (size() == 1) return Status::OK();
  return barrier_.sync("barrier", deadline);
}

void* ShmCommunicator::fusion_buffer(std::size_t bytes) {
  // Not before the regions' pages are reserved (the runtime packs into it at once); on a
  // failed reservation the runtime packs elsewhere and allreduce() reports it.
  if (bytes > seg_.region_bytes()) return nullptr;
  if (!seg_.wait_regions(deadline_after(options_.bootstrap_timeout_seconds)).ok()) return nullptr;
  return seg_.region(rank());
}

// Each rank writes its words into its control area, one barrier, each ANDs everyone's.
// Consecutive calls alternate between two areas: a rank writes an area again only after
// the barrier of the call in between, which every rank reaches only after it finished
// reading that area.
Status ShmCommunicator::control_and(std::vector<std::uint64_t>& words, Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check("control_and"));
  if (words.size() * sizeof(std::uint64_t) > kControlBytes) {
    return delegated(base_->control_and(words, deadline));
  }
  if (size() == 1 || words.empty()) return Status::OK();
  const int p = parity_;
  parity_ ^= 1;
  std::memcpy(seg_.control(p, rank()), words.data(), words.size() * sizeof(std::uint64_t));
  KOLO_RETURN_IF_ERROR(barrier_.sync("control_and", deadline, &nudge_));
  for (int r = 0; r < size(); ++r) {
    if (r == rank()) continue;
    const std::uint64_t* theirs = seg_.control(p, r);
    for (std::size_t i = 0; i < words.size(); ++i) words[i] &= theirs[i];
  }
  return Status::OK();
}

}  // namespace kolo::transport::shm
