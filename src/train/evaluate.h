// Validation loss: over a loader's batches (the trainer's periodic validation), and over a split read
// as consecutive windows from its start (`tokamak eval`), a number any implementation can reproduce
// from docs/eval.md.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/loader.h"
#include "model/config.h"
#include "model/model.h"
#include "ops/ops.h"

namespace tk {

// The loss summed over `batches` batches of the loader, forward only; gradients are untouched. on_batch, when
// given, is told each batch's tokens as it is done (a progress bar's).
LossSum evaluate(Model& model, DataLoader& loader, int64_t batches,
                 const std::function<void(int64_t tokens)>& on_batch = nullptr);

struct SplitEvalOptions {
  std::string data_dir;
  std::string split = "val";
  int B = 4;               // windows per forward: speed only, the result does not depend on it
  int T = 1024;            // window length: the result does depend on it
  int64_t max_tokens = 0;  // evaluate the first max(1, max_tokens / T) windows; 0: every window
  bool progress = false;   // a progress bar on stderr while it runs
};

struct SplitEval {
  double loss = 0;         // mean over every target (nats)
  double perplexity = 0;   // exp(loss)
  int64_t tokens = 0;      // targets counted: windows * T
  int64_t windows = 0;
};

// Window w of the split is its tokens [w*T, w*T + T]: inputs the first T, targets the last T (so
// consecutive windows share one token and every target is counted once). `weights` are fp32 in the
// layout order of `cfg`. A loss that is not finite (finite weights too large for the numbers computed from
// them) is a tk::Error naming the windows and where their forward first left finite numbers.
SplitEval evaluate_split(const ModelConfig& cfg, const std::vector<float>& weights, Ops& ops,
                         const SplitEvalOptions& o);

}  // namespace tk
