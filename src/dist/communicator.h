// Communicator: the collectives of data-parallel training (all-reduce, reduce-scatter, all-gather, broadcast,
// barrier) over the buffers of a compute backend, queued on a queue of their own and ordered against the
// backend's compute queue by events. NCCL carries them on CUDA (nccl/), MPI on the CPU backend (mpi_communicator.h);
// a run of one rank takes the same calls, each a copy or nothing. Backends never call NCCL or MPI themselves.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/tensor.h"
#include "dist/world.h"
#include "ops/ops.h"

namespace tk::dist {

enum class ReduceOp { Sum, Max };
const char* reduce_op_name(ReduceOp op);

// A point on the communicator's queue: waiting for it covers the collective that returned it and every one
// queued before it.
using Ticket = int64_t;

// What a communicator measured of this rank's communication (docs/distributed.md, "What communication costs"), in
// seconds. A collective's time includes waiting for the ranks that reach it last, so ranks that are slower to get
// there (more data wait, more compute) show as communication time on the others.
struct CommunicationTimes {
  // The collectives' own time on the communicator's queue: NCCL, between CUDA events recorded on its stream before
  // and after each; MPI, the wall time of each (it runs on the calling thread).
  double collective_s = 0;
  // The part of it the compute waited for: NCCL, how long the compute stream sat blocked on a collective in
  // compute_waits (an event before the wait, one after); MPI, all of collective_s, since the thread that computes
  // runs the collective and computes nothing meanwhile.
  double exposed_s = 0;
  // host_all_gather's wall time (the loss and norm sums, agreement, stop decisions): synchronous, so the host waits
  // for all of it; counted here only, not in collective_s or exposed_s.
  double host_s = 0;
  int64_t collectives = 0;  // the collectives whose time collective_s holds (host_all_gather's not among them)
};

class Communicator {
 public:
  explicit Communicator(const World& world) : world_(world) {}
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual const char* name() const = 0;  // "mpi", "nccl"
  const World& world() const { return world_; }
  int rank() const { return world_.rank; }
  int world_size() const { return world_.size; }
  int local_rank() const { return world_.local_rank; }

  // ---- collectives ----------------------------------------------------------------------------
  // Each is queued on the communicator's queue and returns at once; its outputs may be read once the compute
  // queue has waited for its ticket (compute_waits) or synchronize() has returned. Buffers are the backend's
  // device memory, contiguous, of any dtype (reductions: f32, f64, bf16, i32, u32, i8, u8); every rank calls
  // the same collectives in the same order with the same counts. Results are deterministic: a sum adds the
  // ranks' values in a fixed order for a given world size (MPI: rank 0 + rank 1 + ... in the element type's
  // accumulator, f32 for bf16, rounded once; NCCL: its ring or tree for that size).
  //
  // out[i] = op over ranks r of in_r[i]. out may be in (in place).
  virtual Ticket all_reduce(const Tensor& out, const Tensor& in, ReduceOp op) = 0;
  // in holds world_size() equal chunks; rank r's out = op over ranks of their chunk r. out.numel() *
  // world_size() == in.numel(); out may be chunk rank() of in (in place).
  virtual Ticket reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op) = 0;
  // Chunk r of out = rank r's in. out.numel() == in.numel() * world_size(); in may be chunk rank() of out.
  virtual Ticket all_gather(const Tensor& out, const Tensor& in) = 0;
  // Every rank's buf = root's buf.
  virtual Ticket broadcast(const Tensor& buf, int root) = 0;
  // Completes once every rank has queued its barrier.
  virtual Ticket barrier() = 0;

  // ---- ordering with a backend's compute queue (Ops::Queue::compute) ---------------------------
  // The collectives queued after this call start once the work queued on `ops`' compute queue so far is done:
  // call it after the compute queue has been given what writes a collective's input.
  virtual void wait_for_compute(Ops& ops) = 0;
  // The work queued on `ops`' compute queue after this call starts once the collective `t` (and every one before
  // it) is done: call it before queueing what reads a collective's output or writes its buffers again.
  virtual void compute_waits(Ops& ops, Ticket t) = 0;
  // The same for one of `ops`' copy queues (Ops::Queue::upload or download): the copies queued on it after this call
  // start once the collective `t` is done, e.g. a reduced chunk taken down to host memory as soon as it is reduced.
  // Not timed: only the compute queue's waits are exposed communication.
  virtual void copy_queue_waits(Ops& ops, Ops::Queue q, Ticket t) = 0;
  // Returns once every queued collective is done (the host may then read their outputs).
  virtual void synchronize() = 0;

  // ---- small host values: agreement at start, stop decisions (agreement.h) ------------------------
  // all[r * bytes ... (r+1) * bytes) = rank r's mine, on every rank; returns when done. bytes is the same on every
  // rank. Set-up and control values only (a staging copy on devices).
  virtual void host_all_gather(const void* mine, void* all, size_t bytes) = 0;

  // ---- what communication cost ----------------------------------------------------------------------
  // The times of the collectives and compute waits that have completed since the last call, and of the host gathers
  // since then; never waits. Call it once the compute queue's work is done (as a training step's end is) to have all
  // of that work's: the rest counts in the next call. The timing itself adds no synchronisation: NCCL reuses its
  // events from a pool and reads them back once they are done.
  virtual CommunicationTimes take_times() = 0;

 protected:
  World world_;
};

// How long a collective may wait for the other ranks before this rank gives up with an error naming them (a dead or
// hung peer, or ranks that call different collectives): TOKAMAK_COLLECTIVE_TIMEOUT seconds, 300 unless set.
std::chrono::milliseconds collective_timeout();

class Session;
// The communicator of this rank of `session`'s run: NCCL on CUDA device world.local_rank when the rank computes on
// the GPU (`gpu`), MPI otherwise. A CUDA backend it is used with must be on that device.
std::unique_ptr<Communicator> make_communicator(const Session& session, bool gpu);

}  // namespace tk::dist
