// kolo's own ring allreduce over gloo's unbound buffers (allreduce and allreduce_pieces).
//
// The data is the concatenation of the pieces (one piece for allreduce()). It is cut into
// n blocks of about equal element counts (block b is the result rank b completes), and
// each block into segments of at most kSegmentBytes. The cuts depend only on the total
// count, the element size and n, never on how the concatenation is split into pieces, so
// ranks that pack (a joined rank contributing the identity) and ranks that pass pieces
// exchange the same messages.
//
// Each segment makes 2 (n - 1) hops, in "global steps" g = 0 .. 2n - 3:
//   g < n - 1 (reduce-scatter): rank r sends its partial of block (r - g - 1) to r + 1
//     and receives r - 1's partial of block (r - g - 2) into a scratch slot, folding its
//     own contribution in (partial op own) into its output, from where it is sent on (the
//     slot is free at once; the result overwrites the output later). At g = n - 2 the
//     received block is r's own and the fold is the result.
//   g >= n - 1 (allgather, t = g - n + 1): rank r sends the result of block (r - t) and
//     receives block (r - t - 1) straight into its output.
// So every element's result is ((x[b+1] op x[b+2]) op ...) op x[b] for its block b, folded
// once by one rank and copied to the others: the same bits on every rank.
//
// Pipelining: every rank processes its receives in the order (g, segment), the order its
// left neighbour sends them, so each segment is forwarded (or reduced and forwarded) as
// soon as it arrives while the next ones are on the wire. Receives are posted ahead: all
// allgather receives (into the outputs) at the start, and reduce-scatter receives
// kSlots - 1 ahead into kSlots scratch slots of one segment each; the step-0 sends (from the
// inputs) are all posted at the start. Every message has its own slot (base + g * segments +
// segment), so matching never depends on order. No wait but the final ones is for a send:
// gloo completes a send only once the peer has posted its receive, and a slot reused only
// after its forward send completed deadlocked the ring once a block had more segments than
// there were slots.
//
// Output aliasing the input (in place) is safe: a rank's receive into the output of a
// block can only be filled after its own contribution to that block was read (the result
// does not exist before), and its own block's result is written after its last read.
//
// A segment that lies inside one piece is sent from and received into that piece's memory
// (no copy). A segment that straddles pieces is staged: copied into a staging area before
// its step-0 send, its result assembled there, and copied out to the pieces' outputs.
// Every wait is bounded by the call's deadline.
#include <algorithm>
#include <cstring>

#include "common/reduce.h"
#include "transport/gloo/gloo_internal.h"

namespace kolo::transport::gloo_impl {
namespace {

// Segment size: small enough that the pipeline fills quickly and a segment is still in
// cache when it is reduced, large enough that per-message costs stay small (each message
// costs gloo a handshake: measured at 1 and 4 MiB, 2 ranks, 64 KiB segments took ~1.6x the
// time of 512 KiB ones).
constexpr std::size_t kSegmentBytes = 512 << 10;
// Scratch slots of the reduce-scatter receives (kSlots - 1 posted ahead).
constexpr int kSlots = 4;

using Buffer = ::gloo::transport::UnboundBuffer;

struct Part {  // a piece's part of a staged segment
  const char* in;
  char* out;
  std::size_t bytes;
};

struct Segment {
  std::size_t begin = 0, count = 0;  // elements of the concatenation
  int block = 0;
  char* in = nullptr;       // direct: inside one piece
  char* out = nullptr;      // direct: inside one piece
  std::vector<Part> parts;  // staged: the pieces it spans (in and out stay null)
  char* stage = nullptr;
  std::unique_ptr<Buffer> in_buf, out_buf;  // out_buf is the stage's buffer when staged
  int sends = 0;                            // sends pending on in_buf / out_buf
  int in_sends = 0;
};

}  // namespace

Status GlooCommunicator::ring_allreduce(const std::vector<AllreducePiece>& pieces, DataType dtype,
                                        ReduceOp op, Deadline deadline) {
  const int n = size(), me = rank();
  const std::size_t es = dtype_size(dtype);
  std::vector<std::size_t> starts(pieces.size() + 1, 0);
  for (std::size_t k = 0; k < pieces.size(); ++k) starts[k + 1] = starts[k] + pieces[k].count;
  const std::size_t total = starts.back();
  if (total == 0) return Status::OK();

  // Blocks of about total / n elements; segments of at most kSegmentBytes inside them.
  const std::size_t seg_elems = std::max<std::size_t>(1, kSegmentBytes / es);
  std::vector<Segment> segs;
  std::vector<std::vector<int>> of_block(n);
  std::size_t staged_bytes = 0;
  {
    std::size_t at = 0, k = 0;
    for (int b = 0; b < n; ++b) {
      const std::size_t count = total / n + (static_cast<std::size_t>(b) < total % n ? 1 : 0);
      for (std::size_t done = 0; done < count;) {
        Segment s;
        s.begin = at;
        s.count = std::min(seg_elems, count - done);
        s.block = b;
        while (starts[k + 1] <= s.begin) ++k;
        if (s.begin + s.count <= starts[k + 1]) {
          const std::size_t off = (s.begin - starts[k]) * es;
          s.in = static_cast<char*>(const_cast<void*>(pieces[k].in)) + off;
          s.out = static_cast<char*>(pieces[k].out) + off;
        } else {
          for (std::size_t p = k, pos = s.begin; pos < s.begin + s.count; ++p) {
            const std::size_t stop = std::min(s.begin + s.count, starts[p + 1]);
            if (stop > pos) {
              const std::size_t off = (pos - starts[p]) * es;
              s.parts.push_back({static_cast<const char*>(pieces[p].in) + off,
                                 static_cast<char*>(pieces[p].out) + off, (stop - pos) * es});
            }
            pos = std::max(pos, stop);
          }
          staged_bytes += s.count * es;
        }
        of_block[b].push_back(static_cast<int>(segs.size()));
        segs.push_back(std::move(s));
        at += segs.back().count;
        done += segs.back().count;
      }
    }
  }
  stage_.resize(staged_bytes);
  {
    std::size_t off = 0;
    for (auto& s : segs) {
      if (s.parts.empty()) continue;
      s.stage = stage_.data() + off;
      off += s.count * es;
    }
  }
  const std::size_t slot_bytes = std::min(seg_elems, total / n + 1) * es;
  ring_scratch_.resize(kSlots * slot_bytes);
  std::unique_ptr<Buffer> slot_buf[kSlots];
  for (int i = 0; i < kSlots; ++i) {
    slot_buf[i] = context_->createUnboundBuffer(ring_scratch_.data() + i * slot_bytes, slot_bytes);
  }

  const int right = (me + 1) % n, left = (me + n - 1) % n;
  const int steps = 2 * (n - 1);
  const auto nseg = static_cast<std::uint64_t>(segs.size());
  const std::uint64_t base = next_slot(static_cast<int>(steps * nseg) + 1);
  const std::uint64_t token_slot = base + static_cast<std::uint64_t>(steps) * nseg;
  auto slot_of = [&](int g, int seg) { return base + static_cast<std::uint64_t>(g) * nseg + seg; };
  auto mod = [n](int x) { return ((x % n) + n) % n; };
  auto recv_block = [&](int g) { return g < n - 1 ? mod(me - g - 2) : mod(me - (g - n + 1) - 1); };
  auto out_buffer = [&](Segment& s) -> Buffer* {
    if (!s.out_buf) {
      s.out_buf = context_->createUnboundBuffer(s.stage ? s.stage : s.out, s.count * es);
    }
    return s.out_buf.get();
  };
  auto aborted = [](int g) {
    return PeerFailure("step " + std::to_string(g) + " of the ring allreduce was aborted");
  };

  // The allgather's receives, straight into the outputs (or the stages).
  for (int g = n - 1; g < steps; ++g) {
    for (int i : of_block[recv_block(g)])
      out_buffer(segs[i])->recv(left, slot_of(g, i), 0, segs[i].count * es);
  }
  // The reduce-scatter's receives in order, kSlots - 1 posted ahead.
  std::vector<std::pair<int, int>> rs;  // (g, segment)
  for (int g = 0; g < n - 1; ++g) {
    for (int i : of_block[recv_block(g)]) rs.emplace_back(g, i);
  }
  std::size_t posted = 0;
  auto post_until = [&](std::size_t last) {
    for (; posted < rs.size() && posted <= last; ++posted) {
      const auto [g, i] = rs[posted];
      slot_buf[posted % kSlots]->recv(left, slot_of(g, i), 0, segs[i].count * es);
    }
  };
  post_until(kSlots - 1);
  // Rank 0 sends its first data only once rank 1 says its receives are posted. gloo's I/O
  // thread spins (epoll, level-triggered) while a message whose receive is not posted yet
  // waits in its socket, and under the runtime rank 0 enters every call first (it sends
  // the response, the others wait for it): its data would reach rank 1 before rank 1's
  // receives, and rank 1's I/O thread would take a core from the thread that is on its
  // way to post them (measured, 2 ranks on 2 cores: ~4 ms per small allreduce instead of
  // ~0.3 ms). The token goes the other way, to a rank that is waiting already.
  char token = 1;
  std::unique_ptr<Buffer> token_buf = context_->createUnboundBuffer(&token, 1);
  if (me == 1) token_buf->send(left, token_slot, 0, 1);
  if (me == 0) {
    token_buf->recv(right, token_slot, 0, 1);
    if (!wait_data(token_buf.get(), false, deadline)) return aborted(0);
  }
  // Step 0's sends (after the receives: a receive posted first saves gloo's handshake
  // a round trip, and under load every hop waits for a thread to be scheduled): this rank's input
  // of block me - 1, from the inputs (staged: copied).
  for (int i : of_block[mod(me - 1)]) {
    Segment& s = segs[i];
    Buffer* from = nullptr;
    if (s.stage) {
      char* to = s.stage;
      for (const Part& p : s.parts) {
        std::memcpy(to, p.in, p.bytes);
        to += p.bytes;
      }
      from = out_buffer(s);
      ++s.sends;
    } else {
      s.in_buf = context_->createUnboundBuffer(s.in, s.count * es);
      from = s.in_buf.get();
      ++s.in_sends;
    }
    from->send(right, slot_of(0, i), 0, s.count * es);
  }
  for (std::size_t r = 0; r < rs.size(); ++r) {
    const auto [g, i] = rs[r];
    post_until(r + kSlots - 1);  // the slot of r - 1 is free again
    const int slot = static_cast<int>(r % kSlots);
    Buffer* got = slot_buf[slot].get();
    if (!wait_data(got, false, deadline)) return aborted(g);
    Segment& s = segs[i];
    char* partial = static_cast<char*>(got->ptr);
    if (g < n - 2) {
      // Fold this rank's contribution in, into the output (or stage), and pass it on from
      // there: the slot is free at once, and the output is overwritten by the result later.
      if (s.stage) {
        std::memcpy(s.stage, partial, s.count * es);
        char* at = s.stage;
        for (const Part& p : s.parts) {
          reduce_into(at, p.in, p.bytes / es, dtype, op);
          at += p.bytes;
        }
      } else {
        gloo_reduce(s.out, partial, s.in, s.count, dtype, op);
      }
      out_buffer(s)->send(right, slot_of(g + 1, i), 0, s.count * es);
      ++s.sends;
    } else {  // this rank's own block: the result, then the allgather's first send
      if (s.stage) {
        std::memcpy(s.stage, partial, s.count * es);
        char* at = s.stage;
        for (const Part& p : s.parts) {
          reduce_into(at, p.in, p.bytes / es, dtype, op);
          std::memcpy(p.out, at, p.bytes);
          at += p.bytes;
        }
      } else {
        gloo_reduce(s.out, s.in, partial, s.count, dtype, op);
      }
      out_buffer(s)->send(right, slot_of(n - 1, i), 0, s.count * es);
      ++s.sends;
    }
  }
  // The allgather: each block's result arrives once, in order, and is passed on but for
  // the last step's.
  for (int g = n - 1; g < steps; ++g) {
    for (int i : of_block[recv_block(g)]) {
      Segment& s = segs[i];
      if (!wait_data(s.out_buf.get(), false, deadline)) return aborted(g);
      if (s.stage) {
        const char* from = s.stage;
        for (const Part& p : s.parts) {
          std::memcpy(p.out, from, p.bytes);
          from += p.bytes;
        }
      }
      if (g < steps - 1) {
        s.out_buf->send(right, slot_of(g + 1, i), 0, s.count * es);
        ++s.sends;
      }
    }
  }
  if (me == 1 && !wait_data(token_buf.get(), true, deadline)) return aborted(steps);
  for (auto& s : segs) {
    for (; s.sends > 0; --s.sends) {
      if (!wait_data(s.out_buf.get(), true, deadline)) return aborted(steps);
    }
    for (; s.in_sends > 0; --s.in_sends) {
      if (!wait_data(s.in_buf.get(), true, deadline)) return aborted(steps);
    }
  }
  return Status::OK();
}

}  // namespace kolo::transport::gloo_impl
