// Every collective and dtype against a serial computation of the same values, on each rank: run as one process (world
// size 1, the same calls), under `mpirun -np 2` and `-np 3` (the MPI communicator, CPU backend), and, built with
// TK_DIST_TEST_CUDA, on GPUs (NCCL, CUDA backend; world size 1 on one GPU). The MPI results must equal the serial
// rank-order computation bitwise, which also makes them bitwise equal from run to run; so must NCCL's where
// order cannot matter (integers, max, two ranks), and within rounding elsewhere. Also: the ordering calls against
// the backend's compute queue, the barrier, the host values, the fingerprint agreement and the stop decision.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/deferred_queues.h"
#include "core/error.h"
#include "core/hash.h"
#include "dist/agreement.h"
#include "dist/communicator.h"
#include "dist/session.h"
#include "ops/cpu/cpu_ops.h"
#ifdef TK_DIST_TEST_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace {

using tk::DType;
using tk::Ops;
using tk::Tensor;
using tk::dist::ReduceOp;

tk::dist::Communicator* g_comm = nullptr;
tk::Ops* g_ops = nullptr;
bool g_nccl = false;

int W() { return g_comm->world_size(); }
int me() { return g_comm->rank(); }

// ---- values and the serial computation ---------------------------------------------------------------

float bf16_bits_to_float(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint16_t float_to_bf16_nearest_even(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint32_t lower = bits & 0xffffu, upper = bits >> 16;
  const bool round_up = lower > 0x8000u || (lower == 0x8000u && (upper & 1u));
  return uint16_t(upper + (round_up ? 1u : 0u));
}

// Rank r's element i: floats of varied sign and magnitude (so that the order of a sum shows), integers over their
// whole range (so that sums wrap).
template <class T>
T value(int rank, int64_t i, uint64_t seed) {
  const uint64_t h = tk::splitmix64(seed * 0x9e3779b97f4a7c15ull ^ (uint64_t(rank) << 48) ^ uint64_t(i));
  const double x = std::ldexp(tk::unit_interval(h) * 2 - 1, int(h & 15) - 6);
  if constexpr (std::is_floating_point_v<T>) return T(x);
  else return T(h >> 7);
}

std::vector<std::byte> rank_values(DType t, int rank, int64_t n, uint64_t seed) {
  std::vector<std::byte> b(size_t(n) * tk::dtype_size(t));
  for (int64_t i = 0; i < n; i++) {
    auto put = [&](auto v) { std::memcpy(b.data() + size_t(i) * sizeof v, &v, sizeof v); };
    switch (t) {
      case DType::F32: put(value<float>(rank, i, seed)); break;
      case DType::F64: put(value<double>(rank, i, seed)); break;
      case DType::BF16: put(uint16_t(float_to_bf16_nearest_even(value<float>(rank, i, seed)))); break;
      case DType::I32: put(value<int32_t>(rank, i, seed)); break;
      case DType::U32: put(value<uint32_t>(rank, i, seed)); break;
      case DType::I8: put(value<int8_t>(rank, i, seed)); break;
      case DType::U8: put(value<uint8_t>(rank, i, seed)); break;
      case DType::U16: put(value<uint16_t>(rank, i, seed)); break;
    }
  }
  return b;
}

// ranks[r][i] combined over r = 0, 1, ... in that order: floats summed left to right in their own precision
// (bf16 in float, rounded once), integers with wrap-around.
template <class T, class Acc>
std::vector<std::byte> serial_reduce_as(const std::vector<std::vector<std::byte>>& ranks, int64_t n, ReduceOp op,
                                        Acc (*load)(T), T (*store)(Acc)) {
  std::vector<std::byte> out(size_t(n) * sizeof(T));
  for (int64_t i = 0; i < n; i++) {
    auto at = [&](size_t r) {
      T v;
      std::memcpy(&v, ranks[r].data() + size_t(i) * sizeof(T), sizeof v);
      return load(v);
    };
    Acc a = at(0);
    for (size_t r = 1; r < ranks.size(); r++) a = op == ReduceOp::Sum ? Acc(a + at(r)) : std::max(a, at(r));
    const T v = store(a);
    std::memcpy(out.data() + size_t(i) * sizeof(T), &v, sizeof v);
  }
  return out;
}

template <class T>
T same(T x) { return x; }
template <class T, class Wide>
T wrap(Wide x) { return T(x); }

std::vector<std::byte> serial_reduce(DType t, const std::vector<std::vector<std::byte>>& ranks, int64_t n, ReduceOp op) {
  switch (t) {
    case DType::F32: return serial_reduce_as<float, float>(ranks, n, op, same<float>, same<float>);
    case DType::F64: return serial_reduce_as<double, double>(ranks, n, op, same<double>, same<double>);
    case DType::BF16:
      return serial_reduce_as<uint16_t, float>(ranks, n, op, bf16_bits_to_float, float_to_bf16_nearest_even);
    case DType::I32:
      return serial_reduce_as<int32_t, int64_t>(ranks, n, op, [](int32_t x) { return int64_t(x); },
                                                wrap<int32_t, int64_t>);
    case DType::U32:
      return serial_reduce_as<uint32_t, uint64_t>(ranks, n, op, [](uint32_t x) { return uint64_t(x); },
                                                  wrap<uint32_t, uint64_t>);
    case DType::I8:
      return serial_reduce_as<int8_t, int32_t>(ranks, n, op, [](int8_t x) { return int32_t(x); }, wrap<int8_t, int32_t>);
    case DType::U8:
      return serial_reduce_as<uint8_t, uint32_t>(ranks, n, op, [](uint8_t x) { return uint32_t(x); },
                                                 wrap<uint8_t, uint32_t>);
    case DType::U16: break;
  }
  ADD_FAILURE() << "no reduction for " << tk::dtype_name(t);
  return {};
}

std::vector<std::vector<std::byte>> every_rank(DType t, int64_t n, uint64_t seed) {
  std::vector<std::vector<std::byte>> v;
  for (int r = 0; r < W(); r++) v.push_back(rank_values(t, r, n, seed));
  return v;
}

// Bitwise, except a float sum that NCCL may order otherwise than rank 0 + rank 1 + ... (three ranks or more).
void expect_result(DType t, ReduceOp op, const std::vector<std::byte>& got, const std::vector<std::byte>& want,
                   const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const bool float_order_free = g_nccl && W() > 2 && op == ReduceOp::Sum &&
                                (t == DType::F32 || t == DType::F64 || t == DType::BF16);
  if (!float_order_free) {
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0) << what << ": not bitwise the serial result";
    return;
  }
  const size_t es = tk::dtype_size(t);
  for (size_t i = 0; i < got.size() / es; i++) {
    auto as_double = [&](const std::vector<std::byte>& b) {
      if (t == DType::F64) return *reinterpret_cast<const double*>(b.data() + i * es);
      if (t == DType::F32) return double(*reinterpret_cast<const float*>(b.data() + i * es));
      return double(bf16_bits_to_float(*reinterpret_cast<const uint16_t*>(b.data() + i * es)));
    };
    const double g = as_double(got), w = as_double(want);
    ASSERT_NEAR(g, w, (t == DType::BF16 ? 2e-2 : 1e-5) * (std::fabs(w) + 1.0)) << what << " element " << i;
  }
}

// ---- device buffers ---------------------------------------------------------------------------------

struct Buffer {
  Tensor t;
  explicit Buffer(DType dt, int64_t n) {
    t = Tensor(g_ops->allocate(std::max<size_t>(1, size_t(n) * tk::dtype_size(dt)), "test"), dt, {n});
  }
  ~Buffer() { g_ops->release(t.data); }
  Buffer(const Buffer&) = delete;
  void upload(const std::vector<std::byte>& b) const { g_ops->upload(t.data, b.data(), b.size()); }
  std::vector<std::byte> download() const {
    std::vector<std::byte> b(t.nbytes());
    g_ops->download(b.data(), t.data, b.size());
    return b;
  }
};

// The pattern of the ZeRO code: inputs written on the compute queue, the collective waits for them, the compute
// queue waits for the collective before reading its output (download runs on the compute queue).
std::vector<std::byte> after(const Buffer& out, const std::function<tk::dist::Ticket()>& collective) {
  g_comm->wait_for_compute(*g_ops);
  const tk::dist::Ticket t = collective();
  g_comm->compute_waits(*g_ops, t);
  return out.download();
}

const DType kReducible[] = {DType::F32, DType::F64, DType::BF16, DType::I32, DType::U32, DType::I8, DType::U8};
const int64_t kCounts[] = {1, 7, 1000, 4099};  // fewer elements than ranks, uneven chunks, several pages

std::string label(DType t, ReduceOp op, int64_t n) {
  return std::string(tk::dtype_name(t)) + " " + tk::dist::reduce_op_name(op) + " n=" + std::to_string(n);
}

// ---- tests --------------------------------------------------------------------------------------------

TEST(Collectives, KnowsItsWorld) {
  EXPECT_EQ(std::string(g_comm->name()), g_nccl ? "nccl" : "mpi");
  EXPECT_GE(W(), 1);
  EXPECT_GE(me(), 0);
  EXPECT_LT(me(), W());
  std::vector<int32_t> ranks(static_cast<size_t>(W()));
  const int32_t mine = me();
  g_comm->host_all_gather(&mine, ranks.data(), sizeof mine);
  for (int r = 0; r < W(); r++) EXPECT_EQ(ranks[size_t(r)], r);
}

TEST(Collectives, AllReduceEveryDtypeOutOfPlaceAndInPlace) {
  for (DType t : kReducible)
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max})
      for (int64_t n : kCounts) {
        const auto ranks = every_rank(t, n, 1);
        const auto want = serial_reduce(t, ranks, n, op);
        Buffer in(t, n), out(t, n);
        in.upload(ranks[size_t(me())]);
        expect_result(t, op, after(out, [&] { return g_comm->all_reduce(out.t, in.t, op); }), want, label(t, op, n));
        EXPECT_EQ(in.download(), ranks[size_t(me())]) << label(t, op, n) << ": the input changed";
        expect_result(t, op, after(in, [&] { return g_comm->all_reduce(in.t, in.t, op); }), want,
                      label(t, op, n) + " in place");
      }
}

TEST(Collectives, ReduceScatterEveryDtypeOutOfPlaceAndInPlace) {
  for (DType t : kReducible)
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max})
      for (int64_t n : kCounts) {
        const auto ranks = every_rank(t, n * W(), 2);
        const auto whole = serial_reduce(t, ranks, n * W(), op);
        const size_t cb = size_t(n) * tk::dtype_size(t);
        const std::vector<std::byte> want(whole.begin() + me() * cb, whole.begin() + (me() + 1) * cb);
        Buffer in(t, n * W()), out(t, n);
        in.upload(ranks[size_t(me())]);
        expect_result(t, op, after(out, [&] { return g_comm->reduce_scatter(out.t, in.t, op); }), want, label(t, op, n));
        Tensor mine(static_cast<std::byte*>(in.t.data) + me() * cb, t, {n});
        g_comm->wait_for_compute(*g_ops);
        g_comm->compute_waits(*g_ops, g_comm->reduce_scatter(mine, in.t, op));
        const auto got = in.download();
        expect_result(t, op, std::vector<std::byte>(got.begin() + me() * cb, got.begin() + (me() + 1) * cb), want,
                      label(t, op, n) + " in place");
      }
}

TEST(Collectives, AllGatherEveryDtypeOutOfPlaceAndInPlace) {
  for (DType t : {DType::F32, DType::F64, DType::BF16, DType::I32, DType::U32, DType::I8, DType::U8, DType::U16})
    for (int64_t n : kCounts) {
      const auto ranks = every_rank(t, n, 3);
      std::vector<std::byte> want;
      for (const auto& r : ranks) want.insert(want.end(), r.begin(), r.end());
      Buffer in(t, n), out(t, n * W());
      in.upload(ranks[size_t(me())]);
      EXPECT_EQ(after(out, [&] { return g_comm->all_gather(out.t, in.t); }), want) << tk::dtype_name(t) << " n=" << n;
      Buffer whole(t, n * W());
      whole.upload(std::vector<std::byte>(want.size()));
      const size_t cb = size_t(n) * tk::dtype_size(t);
      Tensor mine(static_cast<std::byte*>(whole.t.data) + me() * cb, t, {n});
      g_ops->upload(mine.data, ranks[size_t(me())].data(), cb);
      EXPECT_EQ(after(whole, [&] { return g_comm->all_gather(whole.t, mine); }), want)
          << tk::dtype_name(t) << " n=" << n << " in place";
    }
}

TEST(Collectives, BroadcastFromEveryRoot) {
  for (int root = 0; root < W(); root++)
    for (DType t : {DType::F32, DType::BF16, DType::U8}) {
      const auto ranks = every_rank(t, 1000, 4);
      Buffer buf(t, 1000);
      buf.upload(ranks[size_t(me())]);
      EXPECT_EQ(after(buf, [&] { return g_comm->broadcast(buf.t, root); }), ranks[size_t(root)])
          << "root " << root << " " << tk::dtype_name(t);
    }
}

// Bitwise the same on every call, and (MPI) an all-reduce's values are the reduce-scatter's: the same order.
TEST(Collectives, DeterministicAndAllReduceMatchesReduceScatter) {
  const int64_t n = 3000;
  const auto ranks = every_rank(DType::F32, n * W(), 5);
  Buffer in(DType::F32, n * W()), a(DType::F32, n * W()), b(DType::F32, n * W()), rs(DType::F32, n);
  in.upload(ranks[size_t(me())]);
  const auto first = after(a, [&] { return g_comm->all_reduce(a.t, in.t, ReduceOp::Sum); });
  const auto second = after(b, [&] { return g_comm->all_reduce(b.t, in.t, ReduceOp::Sum); });
  EXPECT_EQ(first, second);
  if (g_nccl) return;
  const auto scattered = after(rs, [&] { return g_comm->reduce_scatter(rs.t, in.t, ReduceOp::Sum); });
  const size_t cb = size_t(n) * 4;
  EXPECT_EQ(std::vector<std::byte>(first.begin() + me() * cb, first.begin() + (me() + 1) * cb), scattered);
}

TEST(Collectives, BarrierWaitsForEveryRank) {
  using clock = std::chrono::steady_clock;  // system-wide on one host: the ranks' times compare
  std::this_thread::sleep_for(std::chrono::milliseconds(100 * me()));
  const int64_t entered = clock::now().time_since_epoch().count();
  g_comm->compute_waits(*g_ops, g_comm->barrier());
  g_comm->synchronize();
  const int64_t left = clock::now().time_since_epoch().count();
  std::vector<int64_t> all(size_t(2 * W()));
  const int64_t mine[2] = {entered, left};
  g_comm->host_all_gather(mine, all.data(), sizeof mine);
  int64_t last_in = 0, first_out = INT64_MAX;
  for (int r = 0; r < W(); r++) {
    last_in = std::max(last_in, all[size_t(2 * r)]);
    first_out = std::min(first_out, all[size_t(2 * r + 1)]);
  }
  EXPECT_GE(first_out, last_in) << "a rank left the barrier before the last one entered it";
}

// Under TOKAMAK_CPU_DEFERRED_QUEUES=1 (the *_deferred_queues ctest entries) the MPI communicator runs a collective only
// when the compute queue waits for its ticket: until then its output is as it was, and a wait runs what was queued up
// to it and no more.
TEST(Collectives, DeferredCollectivesRunWhenTheirTicketIsWaitedFor) {
  if (g_nccl || !tk::deferred_queues_requested()) GTEST_SKIP() << "the communicator's queue is not deferred";
  const int64_t n = 64;
  Buffer in(DType::F32, n), first(DType::F32, n), second(DType::F32, n);
  in.upload(rank_values(DType::F32, me(), n, 11));
  const std::vector<std::byte> untouched(size_t(n) * sizeof(float), std::byte{0x7f});
  first.upload(untouched);
  second.upload(untouched);
  const tk::dist::Ticket t1 = g_comm->all_reduce(first.t, in.t, ReduceOp::Sum);
  g_comm->all_reduce(second.t, in.t, ReduceOp::Sum);
  EXPECT_EQ(first.download(), untouched) << "ran before anything waited for it";
  g_comm->compute_waits(*g_ops, t1);
  EXPECT_NE(first.download(), untouched);
  EXPECT_EQ(second.download(), untouched) << "the wait for the first ran the second too";
  g_comm->synchronize();
  EXPECT_EQ(second.download(), first.download());
}

// A copy queue made to wait for a collective (copy_queue_waits) copies its output, not what was there before: the
// ZeRO 2/3 slices in host memory are taken down so. Under deferred queues the copy runs only when the compute queue
// waits for it, and the collective only when something waits for its ticket: without the copy queue's wait, the copy
// would take the output down before the collective ran.
TEST(Collectives, ACopyQueueWaitsForItsCollective) {
  const int64_t n = 4099;
  Buffer in(DType::F32, n), out(DType::F32, n), reference(DType::F32, n);
  in.upload(rank_values(DType::F32, me(), n, 5));
  out.upload(std::vector<std::byte>(size_t(n) * sizeof(float), std::byte{0x7f}));
  const std::vector<std::byte> want =
      after(reference, [&] { return g_comm->all_reduce(reference.t, in.t, ReduceOp::Sum); });
  std::vector<std::byte> host(size_t(n) * sizeof(float));
  g_comm->wait_for_compute(*g_ops);
  g_comm->copy_queue_waits(*g_ops, Ops::Queue::download, g_comm->all_reduce(out.t, in.t, ReduceOp::Sum));
  g_ops->copy_async(host.data(), out.t.data, host.size(), Ops::Queue::download);
  g_ops->wait_event(Ops::Queue::compute, g_ops->record_event(Ops::Queue::download));
  g_ops->synchronize();
  EXPECT_EQ(host, want);
  g_comm->synchronize();
}

TEST(Collectives, RefusesWhatItCannotDo) {
  Buffer a(DType::U16, 4), b(DType::F32, 4), c(DType::F32, 5);
  EXPECT_THROW(g_comm->all_reduce(a.t, a.t, ReduceOp::Sum), tk::Error);
  EXPECT_THROW(g_comm->all_reduce(b.t, c.t, ReduceOp::Sum), tk::Error);
  EXPECT_THROW(g_comm->all_gather(b.t, c.t), tk::Error);
  EXPECT_THROW(g_comm->broadcast(b.t, W()), tk::Error);
}

TEST(Agreement, SameFingerprintsPass) {
  tk::dist::Fingerprint f;
  f.add("command line", "train --model tiny").add("data", "shards 1..4");
  EXPECT_NO_THROW(tk::dist::require_agreement(*g_comm, f));
}

TEST(Agreement, TheFirstRankThatDiffersIsNamedWithThePart) {
  if (W() == 1) GTEST_SKIP() << "one rank always agrees with itself";
  tk::dist::Fingerprint f;
  f.add("command line", "train --model tiny").add("data", me() >= 1 ? "other shards" : "shards 1..4");
  try {
    tk::dist::require_agreement(*g_comm, f);
    ADD_FAILURE() << "rank " << me() << " accepted different fingerprints";
  } catch (const tk::Error& e) {
    const std::string want = "the ranks disagree on the data: rank 1 of " + std::to_string(W()) + " differs from rank 0";
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos)
        << e.what();
  }
  tk::dist::Fingerprint g;
  g.add("command line", "x");
  if (me() == W() - 1) g.add("model", "y");
  try {
    tk::dist::require_agreement(*g_comm, g);
    ADD_FAILURE() << "rank " << me() << " accepted fingerprints of different builds";
  } catch (const tk::Error& e) {
    EXPECT_NE(std::string(e.what()).find("different builds"), std::string::npos) << e.what();
  }
}

TEST(StopDecision, AnyRanksFlagStopsEveryRank) {
  EXPECT_FALSE(tk::dist::any_rank(*g_comm, false));
  EXPECT_TRUE(tk::dist::any_rank(*g_comm, me() == W() - 1));
  EXPECT_TRUE(tk::dist::any_rank(*g_comm, true));
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  try {
    tk::dist::Session session(tk::dist::read_world());
#ifdef TK_DIST_TEST_CUDA
    auto ops = tk::make_cuda_ops(session.world().local_rank);
    g_nccl = true;
#else
    auto ops = tk::make_cpu_ops(DType::F32);
#endif
    g_ops = ops.get();
    auto comm = tk::dist::make_communicator(session, g_nccl);
    g_comm = comm.get();
    if (session.world().rank > 0) GTEST_FLAG_SET(brief, true);  // the other ranks speak only of failures
    const int failed = RUN_ALL_TESTS();
    comm.reset();
    return session.finish(failed);
  } catch (const tk::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
