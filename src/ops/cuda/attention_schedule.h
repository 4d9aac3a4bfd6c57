// The schedule of the attention backward of our own (attention_bwd.cu), for the device and for the CPU tests that
// check it (tests/cpu/attention_schedule_test.cpp): which kv blocks a CTA takes, in which order it walks their q
// blocks, and in which order the kv blocks add their parts to a q block's dQ.
//
// Keys come in n_kv blocks of 128, queries in n_q = 2 n_kv blocks of 64; kv block j is seen by q blocks 2 j .. n_q - 1.
// CTA p (of ceil(n_kv / 2) a (batch row, kv head)) takes kv block n_kv - 1 - p and walks its q blocks upwards from
// the diagonal, then kv block p walking downwards from the top (the middle block of an odd n_kv alone, upwards).
// Every CTA then has n_q + 2 q blocks (the middle one fewer), and the step at which a CTA reaches q block i with
// kv block j is `arrival(i, j)`: i - 2 j for the blocks that walk up, 2 j + 2 + (n_q - 1 - i) for those that walk
// down (the other parity: no two kv blocks reach a q block at the same step). A q block's dQ takes its kv blocks'
// parts in arrival order: `turn(i, j)` parts come before kv block j's.
#pragma once

#if defined(__CUDACC__)
#define TK_SCHEDULE_FN __host__ __device__ __forceinline__
#else
#define TK_SCHEDULE_FN inline
#endif

namespace tk::cuda::attn_schedule {

struct Step {
  int j, i;  // kv block, q block
};

TK_SCHEDULE_FN int pairs(int n_kv) { return (n_kv + 1) / 2; }
TK_SCHEDULE_FN int up_block(int p, int n_kv) { return n_kv - 1 - p; }
TK_SCHEDULE_FN int down_block(int p) { return p; }
// Steps (q blocks) of CTA p's first kv block, and of both.
TK_SCHEDULE_FN int steps_up(int p, int n_kv) { return 2 * n_kv - 2 * up_block(p, n_kv); }
TK_SCHEDULE_FN int steps(int p, int n_kv) {
  return steps_up(p, n_kv) + (down_block(p) != up_block(p, n_kv) ? 2 * n_kv - 2 * down_block(p) : 0);
}
// CTA p's step s: its kv block and q block.
TK_SCHEDULE_FN Step step_of(int p, int s, int n_kv) {
  const int up = steps_up(p, n_kv);
  return s < up ? Step{up_block(p, n_kv), 2 * up_block(p, n_kv) + s} : Step{down_block(p), 2 * n_kv - 1 - (s - up)};
}
TK_SCHEDULE_FN bool walks_up(int j, int n_kv) { return j >= n_kv / 2; }
TK_SCHEDULE_FN int arrival(int i, int j, int n_kv) {
  return walks_up(j, n_kv) ? i - 2 * j : 2 * j + 2 + (2 * n_kv - 1 - i);
}
// The parts q block i's dQ takes before kv block j's (its contributors are kv blocks 0 .. i / 2).
TK_SCHEDULE_FN int turn(int i, int j, int n_kv) {
  const int mine = arrival(i, j, n_kv);
  int before = 0;
  for (int k = 0; k <= i / 2; k++) before += arrival(i, k, n_kv) < mine;
  return before;
}

}  // namespace tk::cuda::attn_schedule

#undef TK_SCHEDULE_FN
