// `tokamak grads`: the mean loss, every parameter gradient (under its HF name) and the logits of a
// Hugging Face model on one given batch, written as safetensors. It is the engine's side of the
// comparison with transformers (tests/hf/compare_hf.py), on either backend.
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "cli/command.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/log.h"
#include "io/hf.h"
#include "io/safetensors.h"
#include "model/generate.h"
#include "model/model.h"

namespace {

struct GradsOptions {
  std::string model, tokens, out, device = "cpu";
};

// A batch as JSON, {"tokens": [[...], ...]}: B rows of T+1 ids, every id a token of the vocabulary; optionally
// "documents": per row the positions where its packed documents start (attention within each, positions restarting:
// --doc-mask's batch), and "trained": per row T 0/1 flags, the loss mask of its targets (a fine-tune's batch).
struct TokenBatch {
  int B = 0, T = 0;
  std::vector<int32_t> ids;                  // [B, T+1]
  std::vector<std::vector<int32_t>> starts;  // [B][...]: empty, each row one document
  std::vector<uint8_t> trained;              // [B, T]: empty, every target trained
};

TokenBatch read_tokens(const std::string& path, int vocab) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(tk::fs::read_file(path));
  } catch (const nlohmann::json::exception& e) {
    tk::fail("{} is not valid JSON: {}", path, e.what());
  }
  TK_CHECK(j.is_object() && j.contains("tokens") && j["tokens"].is_array() && !j["tokens"].empty(),
           "{} must hold {{\"tokens\": [[...], ...]}}: rows of token ids", path);
  TokenBatch b;
  b.B = int(j["tokens"].size());
  for (const auto& row : j["tokens"]) {
    TK_CHECK(row.is_array() && row.size() >= 2, "{}: every row needs at least 2 token ids (an input and a target)",
             path);
    if (b.T == 0) b.T = int(row.size()) - 1;
    TK_CHECK(int(row.size()) == b.T + 1, "{}: rows differ in length ({} and {})", path, b.T + 1, row.size());
    for (const auto& id : row) {
      TK_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < vocab,
               "{}: token {} is not an id of the model's vocabulary of {}", path, id.dump(), vocab);
      b.ids.push_back(id.get<int32_t>());
    }
  }
  if (j.contains("documents")) {
    TK_CHECK(j["documents"].is_array() && int(j["documents"].size()) == b.B,
             "{}: \"documents\" must hold one list of start positions per row", path);
    for (const auto& row : j["documents"]) {
      std::vector<int32_t> starts;
      for (const auto& s : row) {
        TK_CHECK(s.is_number_integer() && s.get<int64_t>() >= 0 && s.get<int64_t>() <= b.T &&
                     (starts.empty() || s.get<int64_t>() > starts.back()),
                 "{}: document starts must be increasing positions in [0, {}]", path, b.T);
        starts.push_back(s.get<int32_t>());
      }
      TK_CHECK(!starts.empty() && starts[0] == 0, "{}: a row's first document starts at 0", path);
      b.starts.push_back(std::move(starts));
    }
  }
  if (j.contains("trained")) {
    TK_CHECK(j["trained"].is_array() && int(j["trained"].size()) == b.B,
             "{}: \"trained\" must hold one list of T flags per row", path);
    for (const auto& row : j["trained"]) {
      TK_CHECK(row.is_array() && int(row.size()) == b.T, "{}: \"trained\" rows must hold T = {} flags", path, b.T);
      for (const auto& f : row) {
        TK_CHECK(f.is_number_integer() && (f == 0 || f == 1), "{}: a \"trained\" flag is 0 or 1", path);
        b.trained.push_back(uint8_t(f.get<int>()));
      }
    }
  }
  return b;
}

// Logits [B, T, V] at every position, through the generator's KV cache (a one-token prompt, then one
// step per token): the sampling path, held to transformers as the training path is by loss and gradients.
std::vector<float> cached_logits(const tk::Model& model, const TokenBatch& tokens) {
  tk::Generator gen(model, tokens.T);
  std::vector<float> out;
  for (int b = 0; b < tokens.B; b++) {
    const int32_t* row = tokens.ids.data() + size_t(b) * size_t(tokens.T + 1);
    std::vector<float> logits = gen.prefill({row[0]});
    out.insert(out.end(), logits.begin(), logits.end());
    for (int t = 1; t < tokens.T; t++) {
      logits = gen.step(row[t]);
      out.insert(out.end(), logits.begin(), logits.end());
    }
  }
  return out;
}

int run_grads(const GradsOptions& o) {
  tk::ModelConfig cfg = tk::load_hf_config(o.model);
  TokenBatch tokens = read_tokens(o.tokens, cfg.vocab_size);
  tk::Backend backend = tk::make_backend(o.device);
  const bool packed = !tokens.starts.empty();
  tk::Model model(cfg, *backend.ops, tk::ModelOptions{tokens.B, tokens.T, packed});
  model.set_params_f32(tk::load_params(cfg, model.layout(), o.model));
  model.zero_grads();

  const tk::OwnedBatch batch(tokens.B, tokens.T, tokens.ids, tokens.starts, packed);
  for (size_t i = 0; i < tokens.trained.size(); i++)
    if (!tokens.trained[i]) batch.batch().targets[i] = tk::kUntrainedTarget;
  // 1 / (the trained targets) per token makes these the gradients of the mean loss over them.
  const int64_t trained = tk::count_trained(batch.batch());
  TK_CHECK(trained > 0, "{}: no target is trained on", o.tokens);
  tk::LossSum loss = model.forward_backward(batch.batch(), float(1.0 / double(trained)));
  std::vector<float> grads = model.grads_f32();
  float mean = float(loss.mean());
  // The generator's cache holds one document a row: its logits are written for unpacked batches.
  std::vector<float> logits = packed ? std::vector<float>() : cached_logits(model, tokens);

  tk::SafeTensorsWriter w;
  for (const tk::ParamInfo& p : model.layout().params)
    w.add_borrowed(p.name, "F32", p.shape, grads.data() + p.offset, size_t(p.numel) * sizeof(float));
  w.add_f32("loss", {1}, &mean);
  if (!packed)
    w.add_borrowed("logits", "F32", {tokens.B, tokens.T, cfg.vocab_size}, logits.data(),
                   logits.size() * sizeof(float));
  w.write(o.out);
  tk::log::info("loss {:.6f} over {} targets on {}; gradients of {} tensors written to {}", mean, loss.count,
                backend.ops->name(), model.layout().params.size(), o.out);
  return 0;
}

tk::cli::Command grads_cmd("grads", "Loss, parameter gradients and logits of an HF model on one batch (for comparisons)",
                           [](CLI::App& app) -> tk::cli::Runner {
                             auto o = std::make_shared<GradsOptions>();
                             app.add_option("--model", o->model, "Hugging Face model directory or checkpoint")
                                 ->required();
                             app.add_option("--tokens", o->tokens,
                                            "JSON file {\"tokens\": [[...], ...]}, B rows of T+1 (and optionally "
                                            "\"documents\": each row's document starts, \"trained\": its loss mask)")
                                 ->required();
                             app.add_option("--out", o->out, "safetensors file for the gradients, \"loss\" and \"logits\"")
                                 ->required();
                             app.add_option("--device", o->device, "Backend")
                                 ->check(CLI::IsMember({"cpu", "cuda"}))
                                 ->capture_default_str();
                             return [o] { return run_grads(*o); };
                           });

}  // namespace
