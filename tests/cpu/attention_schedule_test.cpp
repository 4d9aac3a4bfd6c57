// The schedule of the attention backward of our own (src/ops/cuda/attention_schedule.h), checked on the CPU: every
// (kv block, q block) pair is done once, the CTAs' work is equal, a kv block's step is its arrival time, each q block
// takes its parts in a strict order, and the dQ counters' protocol (moved on in batches, and before any wait) never
// deadlocks and, with the CTAs in step, never waits: a model of the kernel's protocol run with random progress.
#include "ops/cuda/attention_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace tk::cuda {
namespace {

namespace sch = attn_schedule;

TEST(AttentionSchedule, EveryPairOnceEqualWorkArrivalIsTheStep) {
  for (int n_kv = 1; n_kv <= 40; n_kv++) {
    SCOPED_TRACE("n_kv " + std::to_string(n_kv));
    const int n_q = 2 * n_kv;
    std::vector<int> seen(size_t(n_kv) * n_q, 0);
    for (int p = 0; p < sch::pairs(n_kv); p++) {
      const bool alone = sch::up_block(p, n_kv) == sch::down_block(p);
      EXPECT_EQ(sch::steps(p, n_kv), alone ? n_q - 2 * sch::up_block(p, n_kv) : n_q + 2);
      for (int s = 0; s < sch::steps(p, n_kv); s++) {
        const sch::Step st = sch::step_of(p, s, n_kv);
        ASSERT_GE(st.i, 2 * st.j);  // a q block that sees the kv block
        ASSERT_LT(st.i, n_q);
        seen[size_t(st.j) * n_q + st.i]++;
        EXPECT_EQ(sch::arrival(st.i, st.j, n_kv), s) << "kv " << st.j << " q " << st.i;
        EXPECT_EQ(sch::walks_up(st.j, n_kv), st.j == sch::up_block(p, n_kv));
      }
    }
    for (int j = 0; j < n_kv; j++)
      for (int i = 0; i < n_q; i++) EXPECT_EQ(seen[size_t(j) * n_q + i], i >= 2 * j ? 1 : 0) << j << " " << i;
    for (int i = 0; i < n_q; i++) {  // the turns of a q block's contributors: 0 .. i / 2, each once
      std::vector<int> turns;
      for (int j = 0; j <= i / 2; j++) turns.push_back(sch::turn(i, j, n_kv));
      std::sort(turns.begin(), turns.end());
      for (int k = 0; k <= i / 2; k++) ASSERT_EQ(turns[size_t(k)], k) << "q block " << i;
    }
  }
}

// A model of the kernel's dQ protocol for `groups` (batch row, kv head) groups of CTAs, `group` q heads each, at most
// `resident` CTAs at a time, launched in grid order. A CTA's iteration: the top (its pending counters moved on when
// `batch` are pending), the products (any time), then its turn: if its counter is not there yet, its pending
// counters are moved on, then it waits; then it adds (recorded, to check the order). At the end, the rest are moved on.
struct Model {
  int n_kv, group, groups, resident, batch;
  struct Cta {
    int g, p, it = 0, released = 0, phase = 0;  // phase 0: at the top, 1: at its turn
    bool done = false, launched = false;
  };
  std::vector<Cta> ctas;
  std::vector<int> counter;             // [group index][head][q block]
  std::vector<std::vector<int>> order;  // the kv blocks in the order they added, per counter
  int waits = 0;

  Model(int n_kv_, int group_, int groups_, int resident_)
      : n_kv(n_kv_), group(group_), groups(groups_), resident(resident_) {
    batch = std::min(4, (group + 1) / 2);
    for (int g = 0; g < groups; g++)
      for (int p = 0; p < sch::pairs(n_kv); p++) ctas.push_back({g, p});
    counter.assign(size_t(groups) * group * 2 * n_kv, 0);
    order.assign(counter.size(), {});
  }
  int iters(const Cta& c) const { return sch::steps(c.p, n_kv) * group; }
  size_t slot(const Cta& c, int it) const {
    const sch::Step st = sch::step_of(c.p, it / group, n_kv);
    return (size_t(c.g) * group + size_t(it % group)) * 2 * n_kv + size_t(st.i);
  }
  int turn_at(const Cta& c, int it) const {
    const sch::Step st = sch::step_of(c.p, it / group, n_kv);
    return sch::turn(st.i, st.j, n_kv);
  }
  void move_on(Cta& c, int until) {
    for (int k = c.released; k < until; k++) counter[slot(c, k)] = turn_at(c, k) + 1;
    c.released = until;
  }
  // One action of CTA c; false when it is blocked.
  bool advance(Cta& c) {
    if (c.phase == 0) {
      if (c.it - c.released == batch) move_on(c, c.it);
      c.phase = 1;
      return true;
    }
    const int t = turn_at(c, c.it);
    const size_t s = slot(c, c.it);
    if (t > 0 && counter[s] != t) {
      move_on(c, c.it);
      if (counter[s] != t) return false;
    }
    const sch::Step st = sch::step_of(c.p, c.it / group, n_kv);
    order[s].push_back(st.j);
    EXPECT_EQ(int(order[s].size()) - 1, t) << "kv " << st.j << " added out of turn";
    c.phase = 0;
    if (++c.it == iters(c)) {
      move_on(c, c.it);
      c.done = true;
    }
    return true;
  }
  // Random progress: returns false on a deadlock.
  bool run_random(std::mt19937& rng) {
    size_t next = 0;
    int running = 0;
    while (true) {
      while (running < resident && next < ctas.size()) ctas[next++].launched = true, running++;
      std::vector<size_t> live;
      for (size_t k = 0; k < ctas.size(); k++)
        if (ctas[k].launched && !ctas[k].done) live.push_back(k);
      if (live.empty()) return true;
      std::shuffle(live.begin(), live.end(), rng);
      bool moved = false;
      for (size_t k : live) {
        const int steps = 1 + int(rng() % 3);
        for (int n = 0; n < steps && !ctas[k].done; n++) {
          if (!advance(ctas[k])) break;
          moved = true;
        }
        if (ctas[k].done) running--;
        if (moved) break;
      }
      if (!moved) return false;
    }
  }
  // All CTAs in step, an iteration each a tick (every top before every turn); counts the turns that had to wait.
  // False on a deadlock (a tick in which no CTA added).
  bool run_in_step() {
    for (Cta& c : ctas) c.launched = true;
    bool left = true;
    while (left) {
      left = false;
      bool added = false;
      for (Cta& c : ctas)
        if (!c.done && c.phase == 0) advance(c);
      for (Cta& c : ctas) {
        if (c.done) continue;
        left = true;
        if (advance(c)) added = true;
        else waits++;
      }
      if (left && !added) return false;
    }
    return true;
  }
  void expect_every_counter_complete() const {
    for (size_t s = 0; s < order.size(); s++) {
      const int i = int(s % size_t(2 * n_kv));
      EXPECT_EQ(int(order[s].size()), i / 2 + 1) << "q block " << i;
    }
  }
};

TEST(AttentionSchedule, InStepNobodyWaits) {
  for (int n_kv : {1, 2, 3, 4, 7, 8, 16, 17})
    for (int group : {1, 2, 4, 7}) {
      SCOPED_TRACE("n_kv " + std::to_string(n_kv) + " group " + std::to_string(group));
      Model m(n_kv, group, 1, 1 << 20);
      ASSERT_TRUE(m.run_in_step()) << "deadlock";
      EXPECT_EQ(m.waits, 0);
      m.expect_every_counter_complete();
    }
}

TEST(AttentionSchedule, RandomProgressNeverDeadlocks) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 60; trial++) {
    const int n_kv = 1 + int(rng() % 12), group = 1 + int(rng() % 7), groups = 1 + int(rng() % 4);
    const int pairs = sch::pairs(n_kv);
    // At least one whole (batch row, kv head) group fits (a GPU holds 132 CTAs of this kernel; a group is <= 64).
    const int resident = pairs + int(rng() % (pairs * groups + 1));
    SCOPED_TRACE("n_kv " + std::to_string(n_kv) + " group " + std::to_string(group) + " groups " +
                 std::to_string(groups) + " resident " + std::to_string(resident));
    Model m(n_kv, group, groups, resident);
    ASSERT_TRUE(m.run_random(rng)) << "deadlock";
    m.expect_every_counter_complete();
  }
}

}  // namespace
}  // namespace tk::cuda
