// NcclCommunicator: NCCL in non-blocking mode, so that no call can wait forever. A call that answers ncclInProgress
// (initialisation, connection set-up) is polled against the collective timeout; every collective records an event
// that the watchdog thread polls, with ncclCommGetAsyncError, every 100 ms. A peer that dies makes NCCL report an
// error there; one that hangs leaves a collective undone past the timeout. Either way the watchdog prints what
// happened, aborts the communicator (so that the peers' NCCL fails in turn instead of waiting) and ends the
// process: the main thread may be blocked in a CUDA synchronisation that nothing else would end.
//
// What communication costs is read from the same events: each collective has one recorded on the stream before it
// as well as the one after, and each wait of the compute stream for a collective (compute_waits) one on the compute
// stream before the wait and one after. The elapsed times are read once the later event is done (by the watchdog or
// take_times), never waited for, and the events go back to a pool. TOKAMAK_TRACE_COMM=1 logs each one as it is read:
// which collective, how long it ran, how long the compute stream sat waiting for it.
#include "dist/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <fmt/format.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "dist/mpi_communicator.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cuda_ops.h"

namespace tk::dist {

namespace {

using clock = std::chrono::steady_clock;
constexpr auto kWatchPeriod = std::chrono::milliseconds(100);

ncclDataType_t nccl_type(DType t, const char* op) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::BF16: return ncclBfloat16;
    case DType::I32: return ncclInt32;
    case DType::U32: return ncclUint32;
    case DType::I8: return ncclInt8;
    case DType::U8: return ncclUint8;
    case DType::U16: break;
  }
  fail("{}: NCCL cannot reduce {} buffers", op, dtype_name(t));
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::Sum ? ncclSum : ncclMax; }

std::string seconds_text(std::chrono::milliseconds d) { return fmt::format("{} s", double(d.count()) / 1000.0); }

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const World& world, const ncclUniqueId& id, int device)
      : Communicator(world), device_(device), timeout_(collective_timeout()), trace_(trace_requested()) {
    TK_CUDA_CHECK(cudaSetDevice(device_));
    TK_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    TK_CUDA_CHECK(cudaEventCreateWithFlags(&compute_done_, cudaEventDisableTiming));
    TK_CUDA_CHECK(cudaMalloc(&scratch_, kScratchBytes));
    TK_CUDA_CHECK(cudaMemset(scratch_, 0, kScratchBytes));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    check(ncclCommInitRankConfig(&comm_, world.size, id, world.rank, &config), "ncclCommInitRankConfig", __FILE__,
          __LINE__);
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    if (comm_ != nullptr) close_comm();
    for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
    for (const Pending& p : pending_) {
      if (p.start != nullptr) cudaEventDestroy(p.start);
      cudaEventDestroy(p.done);
    }
    for (const ComputeWait& w : waits_) {
      cudaEventDestroy(w.before);
      cudaEventDestroy(w.after);
    }
    if (compute_done_ != nullptr) cudaEventDestroy(compute_done_);
    if (scratch_ != nullptr) cudaFree(scratch_);
    if (staging_ != nullptr) cudaFree(staging_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  const char* name() const override { return "nccl"; }

  Ticket all_reduce(const Tensor& out, const Tensor& in, ReduceOp op) override {
    check_pair(out, in, "all_reduce");
    TK_CHECK(out.numel() == in.numel(), "all_reduce: out {} and in {} differ in size", out.describe(), in.describe());
    const ncclDataType_t t = nccl_type(in.dtype, "all_reduce");
    const cudaEvent_t start = recorded_event(stream_);
    if (in.numel() > 0)
      check(ncclAllReduce(in.data, out.data, size_t(in.numel()), t, nccl_op(op), comm_, stream_), "ncclAllReduce",
            __FILE__, __LINE__);
    return issued("all_reduce", start);
  }

  Ticket reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op) override {
    check_pair(out, in, "reduce_scatter");
    TK_CHECK(out.numel() * world_size() == in.numel(), "reduce_scatter: in {} must hold {} chunks of out {}",
             in.describe(), world_size(), out.describe());
    const ncclDataType_t t = nccl_type(in.dtype, "reduce_scatter");
    const cudaEvent_t start = recorded_event(stream_);
    if (out.numel() > 0)
      check(ncclReduceScatter(in.data, out.data, size_t(out.numel()), t, nccl_op(op), comm_, stream_),
            "ncclReduceScatter", __FILE__, __LINE__);
    return issued("reduce_scatter", start);
  }

  Ticket all_gather(const Tensor& out, const Tensor& in) override {
    check_all_gather(out, in);
    const cudaEvent_t start = recorded_event(stream_);
    queue_all_gather(out, in);
    return issued("all_gather", start);
  }

  Ticket broadcast(const Tensor& buf, int root) override {
    TK_CHECK(root >= 0 && root < world_size(), "broadcast: root {} is not a rank of {}", root, world_size());
    const cudaEvent_t start = recorded_event(stream_);
    if (buf.nbytes() > 0)
      check(ncclBroadcast(buf.data, buf.data, buf.nbytes(), ncclUint8, root, comm_, stream_), "ncclBroadcast",
            __FILE__, __LINE__);
    return issued("broadcast", start);
  }

  // NCCL has no barrier: a one-element all-reduce completes only once every rank has queued its own.
  Ticket barrier() override {
    const cudaEvent_t start = recorded_event(stream_);
    check(ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_, stream_), "ncclAllReduce (barrier)",
          __FILE__, __LINE__);
    return issued("barrier", start);
  }

  void wait_for_compute(Ops& ops) override {
    // The wait captures the event as recorded now, so one event serves every call.
    TK_CUDA_CHECK(cudaEventRecord(compute_done_, compute_stream(ops)));
    TK_CUDA_CHECK(cudaStreamWaitEvent(stream_, compute_done_, 0));
  }

  void compute_waits(Ops& ops, Ticket t) override {
    const cudaStream_t compute = compute_stream(ops);
    std::lock_guard<std::mutex> lock(mu_);
    const Pending* p = pending_for(t, "compute_waits");
    if (p == nullptr) return;
    // The compute stream reaches `before` once its work so far is done, and `after` once the collective is done too:
    // the time between them is how long it sat blocked.
    const ComputeWait w{spare_event(), spare_event(), t, p->what};
    TK_CUDA_CHECK(cudaEventRecord(w.before, compute));
    TK_CUDA_CHECK(cudaStreamWaitEvent(compute, p->done, 0));
    TK_CUDA_CHECK(cudaEventRecord(w.after, compute));
    waits_.push_back(w);
  }

  void copy_queue_waits(Ops& ops, Ops::Queue q, Ticket t) override {
    TK_CHECK(q != Ops::Queue::compute, "copy_queue_waits: the compute queue waits through compute_waits");
    const cudaStream_t copies = cuda_ops(ops).stream(q);
    std::lock_guard<std::mutex> lock(mu_);
    if (const Pending* p = pending_for(t, "copy_queue_waits")) TK_CUDA_CHECK(cudaStreamWaitEvent(copies, p->done, 0));
  }

  // Polls the stream: the watchdog ends the process if it never completes, and CUDA errors are thrown here.
  void synchronize() override {
    for (int idle = 0;; idle++) {
      const cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) TK_CUDA_CHECK(q);
      std::this_thread::sleep_for(std::chrono::microseconds(idle < 100 ? 10 : 200));
    }
  }

  void host_all_gather(const void* mine, void* all, size_t bytes) override {
    const clock::time_point start = clock::now();
    const size_t total = bytes * size_t(world_size());
    if (staging_bytes_ < bytes + total) {  // set-up values: grows to the largest once
      if (staging_ != nullptr) TK_CUDA_CHECK(cudaFree(staging_));
      staging_bytes_ = bytes + total;
      TK_CUDA_CHECK(cudaMalloc(&staging_, staging_bytes_));
    }
    auto* in = static_cast<std::byte*>(staging_);
    std::byte* out = in + bytes;
    TK_CUDA_CHECK(cudaMemcpyAsync(in, mine, bytes, cudaMemcpyHostToDevice, stream_));
    const Tensor gathered(out, DType::U8, {int64_t(total)}), mine_on_device(in, DType::U8, {int64_t(bytes)});
    check_all_gather(gathered, mine_on_device);
    queue_all_gather(gathered, mine_on_device);
    issued("host_all_gather", nullptr);  // timed on the host, below, not as a collective
    TK_CUDA_CHECK(cudaMemcpyAsync(all, out, total, cudaMemcpyDeviceToHost, stream_));
    synchronize();
    host_s_ += std::chrono::duration<double>(clock::now() - start).count();
  }

  CommunicationTimes take_times() override {
    CommunicationTimes t;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (const cudaError_t e = retire_completed(); e != cudaSuccess)
        cuda::fail_cuda_call(e, "cudaEventQuery/cudaEventElapsedTime (timing the collectives)", __FILE__, __LINE__);
      t.collective_s = std::exchange(collective_ms_, 0.0) / 1000;
      t.exposed_s = std::exchange(exposed_ms_, 0.0) / 1000;
      t.collectives = std::exchange(timed_collectives_, 0);
    }
    t.host_s = std::exchange(host_s_, 0.0);
    return t;
  }

 private:
  static constexpr size_t kScratchBytes = 256;  // the barrier's element

  struct Pending {
    Ticket ticket;
    cudaEvent_t start;  // recorded before the collective; nullptr: not timed as one (host_all_gather's)
    cudaEvent_t done;
    clock::time_point since;  // when it was queued, or when the one before it completed if later
    const char* what;
  };
  // The compute stream waiting for a collective: recorded on it before the wait and after.
  struct ComputeWait {
    cudaEvent_t before, after;
    Ticket ticket;
    const char* what;
  };

  static bool trace_requested() {
    const char* v = std::getenv("TOKAMAK_TRACE_COMM");
    return v != nullptr && *v != '\0' && std::string(v) != "0";
  }

  static void check_pair(const Tensor& out, const Tensor& in, const char* op) {
    TK_CHECK(out.dtype == in.dtype, "{}: out {} and in {} differ in dtype", op, out.describe(), in.describe());
  }

  // The CUDA backend, also under a decorator (tokamak profile's ProfilingOps: Ops::underlying).
  CudaOps& cuda_ops(Ops& ops) const {
    auto* cuda = dynamic_cast<CudaOps*>(&ops.underlying());
    TK_CHECK(cuda != nullptr, "the NCCL communicator orders its collectives against the CUDA backend, not '{}'",
             ops.name());
    TK_CHECK(cuda->device() == device_, "the CUDA backend computes on device {} but rank {}'s communicator is on {}",
             cuda->device(), rank(), device_);
    return *cuda;
  }
  cudaStream_t compute_stream(Ops& ops) const { return cuda_ops(ops).stream(); }

  void check_all_gather(const Tensor& out, const Tensor& in) const {
    check_pair(out, in, "all_gather");
    TK_CHECK(out.numel() == in.numel() * world_size(), "all_gather: out {} must hold {} chunks of in {}",
             out.describe(), world_size(), in.describe());
  }
  // all_gather's NCCL call without its events (host_all_gather times itself on the host).
  void queue_all_gather(const Tensor& out, const Tensor& in) {
    if (in.numel() > 0)
      check(ncclAllGather(in.data, out.data, in.nbytes(), ncclUint8, comm_, stream_), "ncclAllGather", __FILE__,
            __LINE__);
  }

  // Collective t while it is pending, or nullptr once seen done (on the device, nothing to wait for); mu_ held.
  // Pending tickets are consecutive, oldest first.
  const Pending* pending_for(Ticket t, const char* call) const {
    TK_CHECK(t >= 0 && t <= issued_, "{}: ticket {} was not issued (last: {})", call, t, issued_);
    if (pending_.empty() || t < pending_.front().ticket) return nullptr;
    return &pending_[size_t(t - pending_.front().ticket)];
  }

  // An event from the pool (with timing: the pool serves the collectives' and the compute waits' alike); mu_ held.
  cudaEvent_t spare_event() {
    cudaEvent_t e;
    if (spare_events_.empty()) {
      TK_CUDA_CHECK(cudaEventCreate(&e));
    } else {
      e = spare_events_.back();
      spare_events_.pop_back();
    }
    return e;
  }

  // An event from the pool recorded on `stream` now: where a collective starts.
  cudaEvent_t recorded_event(cudaStream_t stream) {
    cudaEvent_t e;
    {
      std::lock_guard<std::mutex> lock(mu_);
      e = spare_event();
    }
    TK_CUDA_CHECK(cudaEventRecord(e, stream));
    return e;
  }

  // A collective was queued (after `start`, recorded before it): an event after it, for compute_waits, for the
  // watchdog and, with `start`, for its time.
  Ticket issued(const char* what, cudaEvent_t start) {
    std::lock_guard<std::mutex> lock(mu_);
    const cudaEvent_t e = spare_event();
    TK_CUDA_CHECK(cudaEventRecord(e, stream_));
    pending_.push_back({++issued_, start, e, clock::now(), what});
    return issued_;
  }

  // The oldest pending collective, seen done: its time counted, its events back to the pool; mu_ held.
  cudaError_t retire_front() {
    const Pending p = pending_.front();
    pending_.pop_front();
    cudaError_t e = cudaSuccess;
    if (p.start != nullptr) {
      float ms = 0;
      e = cudaEventElapsedTime(&ms, p.start, p.done);
      if (trace_) log::info("comm trace: rank {} {} #{} ran {:.3f} ms", rank(), p.what, p.ticket, ms);
      collective_ms_ += ms;
      timed_collectives_++;
      spare_events_.push_back(p.start);
    }
    spare_events_.push_back(p.done);
    return e;
  }

  // Counts what is done of the pending collectives and compute waits, oldest first (each queue completes in order),
  // without waiting for the rest; mu_ held. The first CUDA error met, or cudaSuccess.
  cudaError_t retire_completed() {
    while (!pending_.empty()) {
      const cudaError_t q = cudaEventQuery(pending_.front().done);
      if (q == cudaErrorNotReady) break;
      if (q != cudaSuccess) return q;
      if (const cudaError_t e = retire_front(); e != cudaSuccess) return e;
    }
    while (!waits_.empty()) {
      const ComputeWait w = waits_.front();
      const cudaError_t q = cudaEventQuery(w.after);
      if (q == cudaErrorNotReady) break;
      if (q != cudaSuccess) return q;
      waits_.pop_front();
      float ms = 0;
      const cudaError_t e = cudaEventElapsedTime(&ms, w.before, w.after);
      if (trace_) log::info("comm trace: rank {} compute waited {:.3f} ms for {} #{}", rank(), ms, w.what, w.ticket);
      exposed_ms_ += ms;
      spare_events_.push_back(w.before);
      spare_events_.push_back(w.after);
      if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
  }

  // Every NCCL call goes through here: ncclInProgress is waited out (non-blocking mode), anything else but
  // ncclSuccess aborts the communicator, so that the peers fail too, and throws.
  void check(ncclResult_t r, const char* call, const char* file, int line) {
    const auto start = clock::now();
    while (r == ncclInProgress && comm_ != nullptr) {
      if (clock::now() - start > timeout_) {
        abort_comm();
        fail("NCCL call {} on rank {} of {} did not complete within {}: another rank did not start, died or hangs "
             "(TOKAMAK_COLLECTIVE_TIMEOUT sets the wait)",
             call, rank(), world_size(), seconds_text(timeout_));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (ncclCommGetAsyncError(comm_, &r) != ncclSuccess) break;
    }
    if (r == ncclSuccess) return;
    const std::string detail = comm_ != nullptr ? ncclGetLastError(comm_) : "";
    abort_comm();
    fail("NCCL call {} failed at {}:{} on rank {} of {}: {}{}{}", call, file, line, rank(), world_size(),
         ncclGetErrorString(r), detail.empty() ? "" : ": " + detail,
         r == ncclRemoteError || r == ncclSystemError ? " (a peer rank died or the network between ranks failed)" : "");
  }

  void abort_comm() {
    std::lock_guard<std::mutex> lock(mu_);
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  // At the end: a communicator whose work completed is finalised and destroyed; one left by an error, or whose work
  // does not complete within the timeout, is aborted (finalising could wait for peers that are gone).
  void close_comm() {
    const auto start = clock::now();
    bool drained = std::uncaught_exceptions() == 0;
    while (drained && cudaStreamQuery(stream_) == cudaErrorNotReady) {
      if (clock::now() - start > timeout_) drained = false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ncclResult_t r = drained ? ncclCommFinalize(comm_) : ncclInternalError;
    while (r == ncclInProgress && clock::now() - start < timeout_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (ncclCommGetAsyncError(comm_, &r) != ncclSuccess) r = ncclInternalError;
    }
    if (r == ncclSuccess) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
    comm_ = nullptr;
  }

  // The watchdog thread: NCCL's asynchronous errors, and the oldest pending collective against the timeout.
  void watch() {
    cudaSetDevice(device_);
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      wake_.wait_for(lock, kWatchPeriod);
      if (stop_ || comm_ == nullptr) continue;
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state != ncclSuccess && state != ncclInProgress)
        die(fmt::format("NCCL reported an error on rank {} of {}: {}: {} (a peer rank died or the network between "
                        "ranks failed)",
                        rank(), world_size(), ncclGetErrorString(state), ncclGetLastError(comm_)));
      const auto now = clock::now();
      while (!pending_.empty()) {
        Pending& p = pending_.front();
        const cudaError_t q = cudaEventQuery(p.done);
        if (q == cudaSuccess) {
          const char* what = p.what;
          if (const cudaError_t e = retire_front(); e != cudaSuccess)
            die(fmt::format("CUDA failed timing {} on rank {} of {}: {}", what, rank(), world_size(),
                            cudaGetErrorString(e)));
          if (!pending_.empty()) pending_.front().since = std::max(pending_.front().since, now);
          continue;
        }
        if (q != cudaErrorNotReady)
          die(fmt::format("CUDA failed under {} on rank {} of {}: {}", p.what, rank(), world_size(),
                          cudaGetErrorString(q)));
        if (now - p.since > timeout_)
          die(fmt::format("{} (collective {} of this rank) did not complete within {} on rank {} of {}: another rank "
                          "died, hangs, or called a different collective (TOKAMAK_COLLECTIVE_TIMEOUT sets the wait)",
                          p.what, p.ticket, seconds_text(timeout_), rank(), world_size()));
        break;
      }
      // The compute waits that are done: their times, and their events back to the pool between take_times().
      if (const cudaError_t e = retire_completed(); e != cudaSuccess)
        die(fmt::format("CUDA failed timing the compute's waits for collectives on rank {} of {}: {}", rank(),
                        world_size(), cudaGetErrorString(e)));
    }
  }

  // From the watchdog, with mu_ held: the main thread may be blocked in CUDA, so the process ends here.
  [[noreturn]] void die(const std::string& why) {
    log::error("{}; stopping", why);
    if (comm_ != nullptr) ncclCommAbort(comm_);
    std::_Exit(1);
  }

  int device_;
  std::chrono::milliseconds timeout_;
  bool trace_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t compute_done_ = nullptr;
  void* scratch_ = nullptr;
  void* staging_ = nullptr;  // host_all_gather's device copy of its values
  size_t staging_bytes_ = 0;
  double host_s_ = 0;  // host_all_gather's wall time since the last take_times() (the calling thread's only)

  // Shared with the watchdog.
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Pending> pending_;  // queued collectives not yet seen complete, oldest first
  std::deque<ComputeWait> waits_;  // compute waits not yet seen complete, oldest first
  std::vector<cudaEvent_t> spare_events_;
  Ticket issued_ = 0;
  double collective_ms_ = 0, exposed_ms_ = 0;  // since the last take_times()
  int64_t timed_collectives_ = 0;
  bool stop_ = false;
  std::thread watchdog_;
};

ncclUniqueId parse_unique_id(const std::string& hex) {
  ncclUniqueId id;
  TK_CHECK(hex.size() == 2 * sizeof id.internal, "{} holds {} characters, not the {} of an NCCL unique id", kNcclIdVar,
           hex.size(), 2 * sizeof id.internal);
  for (size_t i = 0; i < sizeof id.internal; i++) {
    unsigned v = 0;
    TK_CHECK(std::sscanf(hex.c_str() + 2 * i, "%2x", &v) == 1, "{} is not hex", kNcclIdVar);
    id.internal[i] = char(v);
  }
  return id;
}

// rank 0's id, handed to every rank by MPI (or made here for a single rank).
ncclUniqueId id_over_mpi(const Session& session) {
  const World& w = session.world();
  ncclUniqueId id{};
  if (w.rank == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    TK_CHECK(r == ncclSuccess, "ncclGetUniqueId failed on rank 0: {}", ncclGetErrorString(r));
  }
  make_mpi_communicator(w, session.mpi())->broadcast(Tensor(id.internal, DType::U8, {int64_t(sizeof id.internal)}), 0);
  return id;
}

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const Session& session) {
  const World& w = session.world();
  const int gpus = cuda_device_count();
  TK_CHECK(w.local_rank < gpus,
           "rank {} is rank {} on its host, which has {} GPU{}: start at most {} ranks per host (one per GPU)", w.rank,
           w.local_rank, gpus, gpus == 1 ? "" : "s", gpus);
  const ncclUniqueId id = w.launcher == Launcher::tokamak ? parse_unique_id(w.nccl_id) : id_over_mpi(session);
  return std::make_unique<NcclCommunicator>(w, id, w.local_rank);
}

std::string nccl_unique_id_hex() {
  ncclUniqueId id;
  const ncclResult_t r = ncclGetUniqueId(&id);
  TK_CHECK(r == ncclSuccess, "ncclGetUniqueId failed: {} (NCCL could not find a network interface to bootstrap "
                             "on; NCCL_SOCKET_IFNAME picks one)",
           ncclGetErrorString(r));
  std::string hex;
  for (char c : id.internal) hex += fmt::format("{:02x}", static_cast<unsigned char>(c));
  return hex;
}

int cuda_device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);
}

}  // namespace tk::dist
