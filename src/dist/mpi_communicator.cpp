// MpiCommunicator: collectives on host memory built from MPI point-to-point messages, run synchronously (the CPU
// backend's ops are synchronous too, so a ticket is done when it is returned). Each one's wall time is its
// communication time, all of it exposed: the thread that computes runs it. Under TOKAMAK_CPU_DEFERRED_QUEUES=1
// (core/deferred_queues.h) a collective runs only when the compute queue waits for its ticket or at synchronize(),
// in the order queued (the same on every rank), so that a step which reads a collective's output too early, or
// writes its input again before it has run, computes wrong numbers in CI.
//
// Why not MPI_Allreduce: its summation order is the library's choice (it may change with the message size, the
// world size or a tuning file). Here every reduction is a reduce-scatter in which rank r receives every rank's
// copy of chunk r and adds them in rank order ((x_0 + x_1) + x_2 ...) in the dtype's accumulator, so an
// all-reduce (reduce-scatter, then all-gather) and a reduce-scatter give bitwise the same values, run after run.
// Each rank sends and receives (W-1)/W of the buffer, as a ring does, in one round instead of W-1.
#include "dist/mpi_communicator.h"

#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "core/deferred_queues.h"
#include "core/error.h"
#include "dist/host_reduction.h"

namespace tk::dist {

[[noreturn]] void fail_mpi_call(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  fail("MPI call {} failed at {}:{}: {}", call, file, line, len > 0 ? std::string(text, size_t(len)) : "unknown error");
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// One MPI message carries at most this many bytes (MPI counts are ints); longer ones go as several, in order.
constexpr size_t kMaxMessageBytes = size_t(1) << 30;
// Tags cycle below 32767, the smallest MPI_TAG_UB the standard allows: a collective's messages carry its own, so
// ranks that disagree on the sequence of collectives time out naming each other instead of mixing messages.
constexpr int kTagCycle = 32767;

// The point-to-point messages of one step of a collective, posted together and waited for together.
class Exchange {
 public:
  Exchange(MPI_Comm comm, int tag, const char* what, int rank) : comm_(comm), tag_(tag), what_(what), rank_(rank) {}

  void send(const void* p, size_t bytes, int peer) {
    for (size_t off = 0; off < bytes; off += kMaxMessageBytes) {
      const int n = int(std::min(kMaxMessageBytes, bytes - off));
      requests_.emplace_back();
      TK_MPI_CHECK(MPI_Isend(static_cast<const char*>(p) + off, n, MPI_BYTE, peer, tag_, comm_, &requests_.back()));
      peers_.push_back(peer);
    }
  }
  void recv(void* p, size_t bytes, int peer) {
    for (size_t off = 0; off < bytes; off += kMaxMessageBytes) {
      const int n = int(std::min(kMaxMessageBytes, bytes - off));
      requests_.emplace_back();
      TK_MPI_CHECK(MPI_Irecv(static_cast<char*>(p) + off, n, MPI_BYTE, peer, tag_, comm_, &requests_.back()));
      peers_.push_back(peer);
    }
  }
  void add_request(MPI_Request r) {
    requests_.push_back(r);
    peers_.push_back(-1);
  }

  // Polls until every message is done; after `timeout`, throws naming the ranks still unheard from. Polling backs off
  // to 1 ms sleeps so that a waiting rank leaves the cores to the ranks still computing (oversubscribed hosts).
  void wait(std::chrono::milliseconds timeout) {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    std::vector<int> done(requests_.size());
    int remaining = int(requests_.size());
    for (int idle = 0; remaining > 0; idle++) {
      int count = 0;
      TK_MPI_CHECK(MPI_Testsome(int(requests_.size()), requests_.data(), &count, done.data(), MPI_STATUSES_IGNORE));
      if (count == MPI_UNDEFINED) break;  // every request is done (all MPI_REQUEST_NULL)
      remaining -= count;
      if (count > 0) idle = 0;
      if (remaining == 0) break;
      if (clock::now() - start > timeout) fail_timeout(timeout);
      if (idle < 64) {
        sched_yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(std::min(1000, 10 * (idle - 63))));
      }
    }
  }

 private:
  [[noreturn]] void fail_timeout(std::chrono::milliseconds timeout) const {
    std::vector<int> silent;
    for (size_t i = 0; i < requests_.size(); i++)
      if (requests_[i] != MPI_REQUEST_NULL && peers_[i] >= 0) silent.push_back(peers_[i]);
    std::sort(silent.begin(), silent.end());
    silent.erase(std::unique(silent.begin(), silent.end()), silent.end());
    std::string who = silent.empty() ? "every other rank" : "rank";
    if (silent.size() > 1) who += "s";
    for (size_t i = 0; i < silent.size(); i++) who += (i == 0 ? " " : ", ") + std::to_string(silent[i]);
    fail("{}: rank {} gave up after {} s waiting for {} (dead, hung, or calling a different collective); "
         "TOKAMAK_COLLECTIVE_TIMEOUT sets the wait",
         what_, rank_, double(timeout.count()) / 1000.0, who);
  }

  MPI_Comm comm_;
  int tag_;
  const char* what_;
  int rank_;
  std::vector<MPI_Request> requests_;
  std::vector<int> peers_;  // -1: a request of all ranks (barrier, communicator set-up)
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(const World& world, bool mpi_initialised) : Communicator(world), timeout_(collective_timeout()) {
    if (world.size == 1) return;
    TK_CHECK(mpi_initialised, "the CPU backend's ranks talk through MPI: start the {} ranks with mpirun or srun",
             world.size);
    int mpi_size = 0;
    TK_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &mpi_size));
    TK_CHECK(mpi_size == world.size, "MPI has {} ranks, the world {}", mpi_size, world.size);
    // A communicator of its own, so that its messages never meet another user's of MPI_COMM_WORLD.
    MPI_Request r;
    TK_MPI_CHECK(MPI_Comm_idup(MPI_COMM_WORLD, &comm_, &r));
    Exchange ex(MPI_COMM_WORLD, 0, "making the MPI communicator", rank());
    ex.add_request(r);
    ex.wait(timeout_);
    TK_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  }
  ~MpiCommunicator() override {
    int finalized = 1;
    MPI_Finalized(&finalized);
    if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
  }

  const char* name() const override { return "mpi"; }

  Ticket all_reduce(const Tensor& out, const Tensor& in, ReduceOp op) override {
    check_pair(out, in, "all_reduce");
    TK_CHECK(out.numel() == in.numel(), "all_reduce: out {} and in {} differ in size", out.describe(), in.describe());
    const auto* ib = static_cast<const std::byte*>(in.data);
    const auto* ob = static_cast<const std::byte*>(out.data);
    TK_CHECK(ob == ib || ob + out.nbytes() <= ib || ob >= ib + in.nbytes(),
             "all_reduce: out and in overlap without being the same buffer (in place)");
    check_reducible(in.dtype, "all_reduce");
    const int W = world_size();
    const int64_t n = in.numel();
    std::vector<int64_t> offsets(size_t(W) + 1);
    for (int r = 0; r <= W; r++) offsets[size_t(r)] = n * r / W;  // balanced chunks; a chunk may be empty
    return submit([this, out, in, op, offsets] {
      const size_t es = dtype_size(in.dtype);
      auto* o = static_cast<std::byte*>(out.data);
      reduce_my_chunk(o + offsets[size_t(rank())] * es, in, offsets, op, "all_reduce");
      gather_chunks(o, offsets, es, "all_reduce");
    });
  }

  Ticket reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op) override {
    check_pair(out, in, "reduce_scatter");
    const int W = world_size();
    TK_CHECK(out.numel() * W == in.numel(), "reduce_scatter: in {} must hold {} chunks of out {}", in.describe(), W,
             out.describe());
    check_reducible(in.dtype, "reduce_scatter");
    const size_t cb = out.nbytes();
    const auto* i = static_cast<const std::byte*>(in.data);
    const auto* o = static_cast<const std::byte*>(out.data);
    TK_CHECK(o == i + rank() * cb || o + cb <= i || o >= i + in.nbytes(),
             "reduce_scatter: out overlaps in other than as chunk {} of it (in place)", rank());
    std::vector<int64_t> offsets(size_t(W) + 1);
    for (int r = 0; r <= W; r++) offsets[size_t(r)] = out.numel() * r;
    return submit([this, out, in, op, offsets] { reduce_my_chunk(out.data, in, offsets, op, "reduce_scatter"); });
  }

  Ticket all_gather(const Tensor& out, const Tensor& in) override {
    check_pair(out, in, "all_gather");
    const int W = world_size();
    TK_CHECK(out.numel() == in.numel() * W, "all_gather: out {} must hold {} chunks of in {}", out.describe(), W,
             in.describe());
    return submit([this, out, in] { gather_bytes(out.data, in.data, in.nbytes(), "all_gather"); });
  }

  Ticket broadcast(const Tensor& buf, int root) override {
    TK_CHECK(!buf.empty() || buf.numel() == 0, "broadcast: the buffer is missing");
    TK_CHECK(root >= 0 && root < world_size(), "broadcast: root {} is not a rank of {}", root, world_size());
    return submit([this, buf, root] {
      if (world_size() == 1 || buf.nbytes() == 0) return;
      Exchange ex(comm_, next_tag(), "broadcast", rank());
      if (rank() == root) {
        for (int r = 0; r < world_size(); r++)
          if (r != root) ex.send(buf.data, buf.nbytes(), r);
      } else {
        ex.recv(buf.data, buf.nbytes(), root);
      }
      ex.wait(timeout_);
    });
  }

  Ticket barrier() override {
    return submit([this] {
      if (world_size() == 1) return;
      MPI_Request r;
      TK_MPI_CHECK(MPI_Ibarrier(comm_, &r));
      Exchange ex(comm_, 0, "barrier", rank());
      ex.add_request(r);
      ex.wait(timeout_);
    });
  }

  // The CPU backend runs its ops synchronously, and these collectives too unless deferred: then a wait runs what
  // is queued up to its ticket.
  void wait_for_compute(Ops&) override {}
  void compute_waits(Ops&, Ticket t) override {
    TK_CHECK(t >= 0 && t <= issued_, "compute_waits: ticket {} was not issued (last: {})", t, issued_);
    run_through(t);
  }
  void copy_queue_waits(Ops&, Ops::Queue, Ticket t) override {
    TK_CHECK(t >= 0 && t <= issued_, "copy_queue_waits: ticket {} was not issued (last: {})", t, issued_);
    run_through(t);  // the CPU backend's copies run at their call, or deferred, after this either way
  }
  void synchronize() override { run_through(issued_); }

  void host_all_gather(const void* mine, void* all, size_t bytes) override {
    const Clock::time_point start = Clock::now();
    gather_bytes(all, mine, bytes, "host_all_gather");
    times_.host_s += seconds_since(start);
  }

  CommunicationTimes take_times() override { return std::exchange(times_, CommunicationTimes{}); }

 private:
  // A collective's ticket: it runs now, or deferred, when a wait or synchronize() reaches it.
  Ticket submit(std::function<void()> collective) {
    ++issued_;
    if (deferred_) {
      queued_.push_back(std::move(collective));
    } else {
      run_timed(collective);
      ran_ = issued_;
    }
    return issued_;
  }

  void run_through(Ticket t) {
    while (ran_ < t) {
      const std::function<void()> collective = std::move(queued_.front());
      queued_.pop_front();
      ran_++;
      run_timed(collective);
    }
  }

  // A collective's time counted (all of it exposed, see above).
  void run_timed(const std::function<void()>& collective) {
    const Clock::time_point start = Clock::now();
    collective();
    const double s = seconds_since(start);
    times_.collective_s += s;
    times_.exposed_s += s;
    times_.collectives++;
  }

  int next_tag() {
    tag_ = (tag_ + 1) % kTagCycle;
    return tag_;
  }

  static void check_pair(const Tensor& out, const Tensor& in, const char* op) {
    TK_CHECK(out.dtype == in.dtype, "{}: out {} and in {} differ in dtype", op, out.describe(), in.describe());
    TK_CHECK((!out.empty() && !in.empty()) || (out.numel() == 0 && in.numel() == 0), "{}: a buffer is missing", op);
  }

  // Sends chunk r of in (elements offsets[r] .. offsets[r+1]) to rank r, receives every rank's copy of this rank's
  // chunk and reduces them in rank order into dst. dst may be this rank's chunk of in: each element is read from
  // every rank's copy before it is written.
  void reduce_my_chunk(void* dst, const Tensor& in, const std::vector<int64_t>& offsets, ReduceOp op, const char* what) {
    const int W = world_size(), me = rank();
    const size_t es = dtype_size(in.dtype);
    const auto* src = static_cast<const std::byte*>(in.data);
    const int64_t mine = offsets[size_t(me) + 1] - offsets[size_t(me)];
    const size_t mine_bytes = size_t(mine) * es;
    scratch_.resize(std::max(scratch_.size(), mine_bytes * size_t(W - 1)));
    std::vector<const void*> copies(static_cast<size_t>(W));
    Exchange ex(comm_, W > 1 ? next_tag() : 0, what, me);
    for (int r = 0; r < W; r++) {
      if (r == me) {
        copies[size_t(r)] = src + offsets[size_t(me)] * es;
        continue;
      }
      std::byte* slot = scratch_.data() + size_t(r < me ? r : r - 1) * mine_bytes;
      copies[size_t(r)] = slot;
      if (mine_bytes > 0) ex.recv(slot, mine_bytes, r);
      const size_t theirs = size_t(offsets[size_t(r) + 1] - offsets[size_t(r)]) * es;
      if (theirs > 0) ex.send(src + offsets[size_t(r)] * es, theirs, r);
    }
    ex.wait(timeout_);
    reduce_in_rank_order(dst, copies, mine, in.dtype, op);
  }

  // Sends this rank's chunk of buf (already in place) to every rank and receives theirs.
  void gather_chunks(std::byte* buf, const std::vector<int64_t>& offsets, size_t es, const char* what) {
    const int W = world_size(), me = rank();
    if (W == 1) return;
    Exchange ex(comm_, next_tag(), what, me);
    const size_t mine = size_t(offsets[size_t(me) + 1] - offsets[size_t(me)]) * es;
    for (int r = 0; r < W; r++) {
      if (r == me) continue;
      const size_t theirs = size_t(offsets[size_t(r) + 1] - offsets[size_t(r)]) * es;
      if (theirs > 0) ex.recv(buf + offsets[size_t(r)] * es, theirs, r);
      if (mine > 0) ex.send(buf + offsets[size_t(me)] * es, mine, r);
    }
    ex.wait(timeout_);
  }

  // out = rank 0's in, rank 1's in, ... (bytes each); in may be this rank's place in out.
  void gather_bytes(void* out, const void* in, size_t bytes, const char* what) {
    auto* o = static_cast<std::byte*>(out);
    std::byte* mine = o + size_t(rank()) * bytes;
    const auto* i = static_cast<const std::byte*>(in);
    if (i != mine) {
      TK_CHECK(i + bytes <= o || i >= o + size_t(world_size()) * bytes,
               "{}: in overlaps out other than as chunk {} of it (in place)", what, rank());
      if (bytes > 0) std::memcpy(mine, i, bytes);
    }
    std::vector<int64_t> offsets(size_t(world_size()) + 1);
    for (int r = 0; r <= world_size(); r++) offsets[size_t(r)] = int64_t(bytes) * r;
    gather_chunks(o, offsets, 1, what);
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::chrono::milliseconds timeout_;
  std::vector<std::byte> scratch_;  // other ranks' copies of this rank's chunk; grows to the largest, then stays
  Ticket issued_ = 0, ran_ = 0;
  const bool deferred_ = deferred_queues_requested();
  std::deque<std::function<void()>> queued_;  // deferred: the collectives issued after ticket ran_, in order
  int tag_ = 0;
  CommunicationTimes times_;  // since the last take_times()
};

}  // namespace

void mpi_world_barrier(int rank, const char* what) {
  MPI_Request r;
  TK_MPI_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &r));
  Exchange ex(MPI_COMM_WORLD, 0, what, rank);
  ex.add_request(r);
  ex.wait(collective_timeout());
}

std::unique_ptr<Communicator> make_mpi_communicator(const World& world, bool mpi_initialised) {
  return std::make_unique<MpiCommunicator>(world, mpi_initialised);
}

}  // namespace tk::dist
