// Times every CPU op at a model's training shapes and adds them up over one forward + backward of the
// whole model: what the CPU reference costs per micro-step, and where the time goes.
// Usage: cpu_ops_bench [preset=tiny] [B=16] [T=256] [repeats=3] [vocab=the preset's]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "model/config.h"
#include "ops/cpu/cpu_ops.h"

namespace {

using tk::DType;
using tk::Tensor;

// A float buffer of random values and its tensor view.
struct Buffer {
  std::vector<float> v;
  Tensor t;
  Buffer(std::initializer_list<int64_t> dims, std::mt19937& rng, float scale = 1.0f) : t(nullptr, DType::F32, dims) {
    v.resize(size_t(t.numel()));
    std::normal_distribution<float> normal(0.0f, scale);
    for (float& e : v) e = normal(rng);
    t.data = v.data();
  }
};

struct Row {
  std::string op;
  double ms_per_call;
  int calls_per_step;
  double gflop_per_call;  // matmul work, 0 for memory-bound ops
};

double best_ms(const std::function<void()>& f, int repeats) {
  f();  // warm-up: page faults, BLAS thread start
  double best = 1e30;
  for (int r = 0; r < repeats; r++) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string preset = argc > 1 ? argv[1] : "tiny";
  const int B = argc > 2 ? std::atoi(argv[2]) : 16, T = argc > 3 ? std::atoi(argv[3]) : 256;
  const int repeats = argc > 4 ? std::atoi(argv[4]) : 3;
  tk::ModelConfig c = tk::ModelConfig::preset(preset);
  if (argc > 5) c.vocab_size = std::atoi(argv[5]);
  const int64_t N = int64_t(B) * T, d = c.d_model, V = c.vocab_size, f = c.ffn_dim, L = c.n_layers;
  const int64_t q = c.q_dim(), W = c.qkv_dim(), hd = c.head_dim;
  const tk::AttnShape s{B, T, c.n_heads, c.n_kv_heads, c.head_dim};
  tk::CpuOps<float> ops;
  std::mt19937 rng(1);

  Buffer x({N, d}, rng), h({N, d}, rng), y({N, d}, rng), rstd({N}, rng), w_norm({d}, rng), dw_norm({d}, rng);
  Buffer w_qkv({W, d}, rng, 0.02f), dw_qkv({W, d}, rng), qkv({N, W}, rng), dqkv({N, W}, rng);
  Buffer w_o({d, q}, rng, 0.02f), dw_o({d, q}, rng), att({N, q}, rng), datt({N, q}, rng), lse({B, c.n_heads, T}, rng);
  Buffer w_gu({2 * f, d}, rng, 0.02f), dw_gu({2 * f, d}, rng), gu({N, 2 * f}, rng), dgu({N, 2 * f}, rng);
  Buffer w_down({d, f}, rng, 0.02f), dw_down({d, f}, rng), act({N, f}, rng), dact({N, f}, rng);
  Buffer table({V, d}, rng, 0.02f), dtable({V, d}, rng), losses({N}, rng), dx({N, d}, rng);
  std::vector<int32_t> ids(static_cast<size_t>(N)), pos(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; n++) ids[size_t(n)] = int32_t(rng() % uint32_t(V)), pos[size_t(n)] = int32_t(n % T);
  const Tensor tokens(ids.data(), DType::I32, {N}), positions(pos.data(), DType::I32, {N});
  const tk::RopeSpec rope = c.rope();
  const float eps = float(c.norm_eps);
  auto gflop = [&](int64_t out, int64_t in) { return 2.0 * double(N * out * in) / 1e9; };

  std::vector<Row> rows;
  auto time = [&](const std::string& op, int calls, double gf, const std::function<void()>& fn) {
    rows.push_back({op, best_ms(fn, repeats), calls, gf});
  };
  const int norms = int(2 * L + 1);
  time("embedding_forward", 1, 0, [&] { ops.embedding_forward(x.t, tokens, table.t); });
  time("residual_rmsnorm_forward", norms, 0,
       [&] { ops.residual_rmsnorm_forward(h.t, y.t, rstd.t, h.t, x.t, w_norm.t, eps); });
  time("linear_forward qkv", int(L), gflop(W, d), [&] { ops.linear_forward(qkv.t, y.t, w_qkv.t, Tensor()); });
  time("qk_norm_rope_forward", int(L), 0, [&] {
    ops.qk_norm_rope_forward(qkv.t, Tensor(), qkv.t, Tensor(), Tensor(), positions, s, rope, eps);
  });
  const double attn_gflop = 2.0 * 2.0 * B * c.n_heads * (double(T) * (T + 1) / 2) * hd / 1e9;
  time("attention_forward", int(L), attn_gflop, [&] { ops.attention_forward(att.t, lse.t, qkv.t, Tensor(), s); });
  time("linear_forward o", int(L), gflop(d, q), [&] { ops.linear_forward(x.t, att.t, w_o.t, Tensor()); });
  time("linear_forward gate_up", int(L), gflop(2 * f, d), [&] { ops.linear_forward(gu.t, y.t, w_gu.t, Tensor()); });
  time("swiglu_forward", int(L), 0, [&] { ops.swiglu_forward(act.t, gu.t); });
  time("linear_forward down", int(L), gflop(d, f), [&] { ops.linear_forward(x.t, act.t, w_down.t, Tensor()); });
  time("lm_head_cross_entropy (+grads)", 1, 4 * gflop(V, d), [&] {
    ops.lm_head_cross_entropy(losses.t, dx.t, dtable.t, y.t, table.t, tokens, 1.0f / float(N), -100);
  });
  time("linear_backward down", int(L), 2 * gflop(d, f),
       [&] { ops.linear_backward(dact.t, dw_down.t, Tensor(), dx.t, act.t, w_down.t); });
  time("swiglu_backward", int(L), 0, [&] { ops.swiglu_backward(dgu.t, dact.t, gu.t); });
  time("linear_backward gate_up", int(L), 2 * gflop(2 * f, d),
       [&] { ops.linear_backward(dx.t, dw_gu.t, Tensor(), dgu.t, y.t, w_gu.t); });
  time("rmsnorm_backward", norms, 0,
       [&] { ops.rmsnorm_backward(dx.t, dw_norm.t, y.t, dx.t, h.t, rstd.t, w_norm.t); });
  time("linear_backward o", int(L), 2 * gflop(d, q),
       [&] { ops.linear_backward(datt.t, dw_o.t, Tensor(), dx.t, att.t, w_o.t); });
  time("attention_backward", int(L), 2.5 * attn_gflop,
       [&] { ops.attention_backward(dqkv.t, datt.t, qkv.t, att.t, lse.t, Tensor(), s); });
  time("qk_norm_rope_backward", int(L), 0, [&] {
    ops.qk_norm_rope_backward(dqkv.t, Tensor(), Tensor(), dqkv.t, qkv.t, Tensor(), Tensor(), Tensor(), positions, s,
                              rope, eps);
  });
  time("linear_backward qkv", int(L), 2 * gflop(W, d),
       [&] { ops.linear_backward(dx.t, dw_qkv.t, Tensor(), dqkv.t, y.t, w_qkv.t); });
  time("embedding_backward", 1, 0, [&] { ops.embedding_backward(dtable.t, tokens, dx.t); });

  fmt::print("{} (L={} d={} heads={}/{} hd={} ffn={} V={}), B={} T={}: one forward + backward from its ops\n",
             preset, L, d, c.n_heads, c.n_kv_heads, hd, f, V, B, T);
  fmt::print("{:<32} {:>10} {:>6} {:>11} {:>9}\n", "op", "ms/call", "calls", "ms/step", "GFLOP/s");
  double total_ms = 0, total_gflop = 0;
  for (const Row& r : rows) {
    const double step_ms = r.ms_per_call * r.calls_per_step;
    total_ms += step_ms;
    total_gflop += r.gflop_per_call * r.calls_per_step;
    fmt::print("{:<32} {:>10.2f} {:>6} {:>11.1f} {:>9}\n", r.op, r.ms_per_call, r.calls_per_step, step_ms,
               r.gflop_per_call > 0 ? fmt::format("{:.1f}", r.gflop_per_call / r.ms_per_call * 1e3) : "");
  }
  fmt::print("{:<32} {:>10} {:>6} {:>11.1f} {:>9.1f}\n", "total", "", "", total_ms, total_gflop / total_ms * 1e3);
  fmt::print("{:.0f} tokens/s; {:.1f} GFLOP of matmul and attention per step\n", double(N) / total_ms * 1e3,
             total_gflop);
  return 0;
}
