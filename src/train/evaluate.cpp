// Evaluation: the loss over loader batches, and the split evaluation of `tokamak eval` (whole batches
// of B windows, then the windows left over one at a time, so the result does not depend on B), which refuses a
// loss that is not finite, naming where the forward first overflowed.
#include "train/evaluate.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/error.h"
#include "core/progress.h"
#include "model/generate.h"

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

// A loss that is not finite, from windows [first, first + batch.B): a tk::Error naming where the forward of the first
// such window first leaves finite numbers (the generator's forward is the same computation, row by row).
[[noreturn]] void refuse_non_finite_loss(const Model& model, const Batch& batch, int64_t first, double loss) {
  std::string where;
  try {
    Generator g(model, batch.T);
    for (int r = 0; r < batch.B && where.empty(); r++) {
      const int32_t* row = batch.inputs + size_t(r) * size_t(batch.T);
      where = g.first_non_finite(std::vector<int32_t>(row, row + batch.T));
      if (!where.empty()) where = fmt::format(": in window {}, {}", first + r, where);
    }
    if (where.empty()) where = ": in " + g.lm_head_overflow();
  } catch (const Error&) {  // no generator at this length (beyond max_position_embeddings): the loss alone is named
  }
  fail("the loss of windows {} to {} is {}{}. The model's weights are finite but too large for the numbers computed "
       "from them; tokamak does not report a loss it could not compute",
       first, first + batch.B - 1, loss, where);
}

// The loss of windows [first, first + count) with a model of B rows (count a multiple of B). A loss that is not
// finite is an error naming where it comes from.
LossSum evaluate_windows(const ModelConfig& cfg, const std::vector<float>& weights, Ops& ops,
                         const SplitEvalOptions& o, int B, int64_t first, int64_t count, ProgressBar* progress) {
  ModelOptions mo;
  mo.B = B;
  mo.T = o.T;
  Model model(cfg, ops, mo);
  model.set_params_f32(weights);
  std::unique_ptr<DataLoader> loader = open_windows(o, B, ops);
  for (int64_t skipped = 0; skipped < first; skipped += B) loader->next();
  LossSum total;
  for (int64_t w = first; w < first + count; w += B) {
    const Batch& batch = loader->next();
    const LossSum l = model.forward(batch);
    if (!std::isfinite(l.sum)) refuse_non_finite_loss(model, batch, w, l.sum);
    total.sum += l.sum;
    total.count += l.count;
    if (progress) progress->add(uint64_t(l.count), 0);
  }
  return total;
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
