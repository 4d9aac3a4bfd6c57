// Evaluation: the loss over loader batches, and the split evaluation of `tokamak eval` (whole batches
// of B windows, then the windows left over one at a time, so the result does not depend on B).
#include "train/evaluate.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/error.h"
#include "core/progress.h"

namespace tk {
namespace {

// Batches in the backend's host memory (page-locked on CUDA), which the model uploads from.
std::unique_ptr<DataLoader> open_windows(const SplitEvalOptions& o, int B, Ops& ops) {
  LoaderOptions lo;
  lo.data_dir = o.data_dir;
  lo.split = o.split;
  lo.B = B;
  lo.T = o.T;
  lo.shuffle = false;  // window w of batch b row r is w = b*B + r: consecutive from the split's start
  lo.allocate = [&ops](size_t bytes) { return ops.allocate_host(bytes, "evaluation batches (host)"); };
  lo.release = [&ops](void* p) { ops.release_host(p); };
  return DataLoader::open(lo);
}

// The loss of windows [first, first + count) with a model of B rows (count a multiple of B).
LossSum evaluate_windows(const ModelConfig& cfg, const std::vector<float>& weights, Ops& ops,
                         const SplitEvalOptions& o, int B, int64_t first, int64_t count, ProgressBar* progress) {
  ModelOptions mo;
  mo.B = B;
  mo.T = o.T;
  Model model(cfg, ops, mo);
  model.set_params_f32(weights);
  std::unique_ptr<DataLoader> loader = open_windows(o, B, ops);
  for (int64_t skipped = 0; skipped < first; skipped += B) loader->next();
  return evaluate(model, *loader, count / B, [progress](int64_t tokens) {
    if (progress) progress->add(uint64_t(tokens), 0);
  });
}

}  // namespace

LossSum evaluate(Model& model, DataLoader& loader, int64_t batches, const std::function<void(int64_t)>& on_batch) {
  LossSum total;
  for (int64_t i = 0; i < batches; i++) {
    LossSum l = model.forward(loader.next());
    total.sum += l.sum;
    total.count += l.count;
    if (on_batch) on_batch(l.count);
  }
  return total;
}

SplitEval evaluate_split(const ModelConfig& cfg, const std::vector<float>& weights, Ops& ops,
                         const SplitEvalOptions& o) {
  TK_CHECK(o.B >= 1 && o.T >= 1, "--batch and --seq must be positive, got {} and {}", o.B, o.T);
  // A one-row loader has one batch per window: its epoch is the number of whole windows in the split.
  const int64_t all_windows = open_windows(o, 1, ops)->batches_per_epoch();
  SplitEval r;
  r.windows = o.max_tokens > 0 ? std::min(all_windows, std::max<int64_t>(1, o.max_tokens / o.T)) : all_windows;
  const int B = int(std::min<int64_t>(o.B, r.windows));
  const int64_t in_batches = r.windows / B * B;

  std::optional<ProgressBar> progress;
  if (o.progress) progress.emplace("eval", uint64_t(r.windows * o.T), "tokens", stderr, ProgressUnit::Items);
  ProgressBar* bar = progress ? &*progress : nullptr;
  LossSum total = evaluate_windows(cfg, weights, ops, o, B, 0, in_batches, bar);
  if (in_batches < r.windows) {
    LossSum rest = evaluate_windows(cfg, weights, ops, o, 1, in_batches, r.windows - in_batches, bar);
    total.sum += rest.sum;
    total.count += rest.count;
  }
  if (bar) bar->clear();
  r.tokens = total.count;
  r.loss = total.mean();
  r.perplexity = std::exp(r.loss);
  return r;
}

}  // namespace tk
