// The schedule of the attention backward of our own (attention_bwd_sm90.cu), for the device and for the CPU tests that
// check it (tests/cpu/attention_schedule_test.cpp): which kv blocks a CTA takes, in which order it walks their q
// blocks, and in which order the kv blocks add their parts to a q block's dQ; and, for the host and the memory plan
// (src/plan/memory_plan.cpp), where the kernel runs and the scratch it takes.
//
// Keys and queries both come in n blocks of 128; kv block j is seen by q blocks j .. n - 1. CTA p (of ceil(n / 2) a
// (batch row, kv head)) takes kv block n - 1 - p and walks its q blocks upwards from the diagonal, then kv block p
// walking downwards from the top (the middle block of an odd n alone, upwards). Every CTA then has n + 1 q blocks
// (the middle one (n + 1) / 2), and the step at which a CTA reaches q block i with kv block j is `arrival(i, j)`:
// i - j for the blocks that walk up, j + n - i for those that walk down. A q block's dQ takes its kv blocks' parts
// in arrival order, ties (an upward and a downward block arriving together) broken by the kv block: `turn(i, j)`
// parts come before kv block j's.
#pragma once

#include <cstddef>

#if defined(__CUDACC__)
#define TK_SCHEDULE_FN __host__ __device__ __forceinline__
#else
#define TK_SCHEDULE_FN inline
#endif

namespace tk::cuda::attn_schedule {

constexpr int kHeadDim = 64;  // the head_dim the kernel takes
constexpr int kBlock = 128;   // keys a kv block, queries a q block

struct Step {
  int j, i;  // kv block, q block
};

TK_SCHEDULE_FN int pairs(int n) { return (n + 1) / 2; }
TK_SCHEDULE_FN int up_block(int p, int n) { return n - 1 - p; }
TK_SCHEDULE_FN int down_block(int p) { return p; }
// Steps (q blocks) of CTA p's first kv block, and of both.
TK_SCHEDULE_FN int steps_up(int p, int n) { return n - up_block(p, n); }
TK_SCHEDULE_FN int steps(int p, int n) {
  return steps_up(p, n) + (down_block(p) != up_block(p, n) ? n - down_block(p) : 0);
}
// CTA p's step s: its kv block and q block.
TK_SCHEDULE_FN Step step_of(int p, int s, int n) {
  const int up = steps_up(p, n);
  return s < up ? Step{up_block(p, n), up_block(p, n) + s} : Step{down_block(p), n - 1 - (s - up)};
}
TK_SCHEDULE_FN bool walks_up(int j, int n) { return j >= n / 2; }
TK_SCHEDULE_FN int arrival(int i, int j, int n) { return walks_up(j, n) ? i - j : j + n - i; }
// The parts q block i's dQ takes before kv block j's (its contributors are kv blocks 0 .. i).
TK_SCHEDULE_FN int turn(int i, int j, int n) {
  const int mine = arrival(i, j, n);
  int before = 0;
  for (int k = 0; k <= i; k++) {
    const int a = arrival(i, k, n);
    before += a < mine || (a == mine && k < j);
  }
  return before;
}

// Whether the kernel runs for T tokens at head_dim on a device where it runs at all with `sms` multiprocessors (0:
// it does not): a CTA may wait on any other of its (batch row, kv head), so those pairs(T / 128), one an SM, must be
// resident together.
inline bool runs(int T, int head_dim, int sms) {
  return sms > 0 && head_dim == kHeadDim && T > 0 && T % kBlock == 0 && pairs(T / kBlock) <= sms;
}
// Its scratch, each part rounded up to 256 bytes: the row sums D [B, Hq, T] f32, dQ's f32 sums [B, Hq, T, 64] and
// the turns' counters [B, Hq, T / 128] int32.
struct ScratchLayout {
  size_t D, dq, counters, total;  // byte offsets of the parts, and the size
};
inline ScratchLayout scratch_layout(int B, int T, int Hq) {
  auto rounded = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
  const size_t rows = size_t(B) * size_t(Hq) * size_t(T);
  ScratchLayout l{};
  l.D = 0;
  l.dq = rounded(rows * 4);
  l.counters = l.dq + rounded(rows * kHeadDim * 4);
  l.total = l.counters + rounded(size_t(B) * size_t(Hq) * size_t(T / kBlock) * 4);
  return l;
}

}  // namespace tk::cuda::attn_schedule

#undef TK_SCHEDULE_FN
