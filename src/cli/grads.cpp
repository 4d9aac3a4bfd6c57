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

// A batch as JSON, {"tokens": [[...], ...]}: B rows of T+1 ids, every id a token of the vocabulary.
struct TokenBatch {
  int B = 0, T = 0;
  std::vector<int32_t> ids;  // [B, T+1]
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
  tk::Model model(cfg, *backend.ops, tk::ModelOptions{tokens.B, tokens.T, false});
  model.set_params_f32(tk::load_params(cfg, model.layout(), o.model));
  model.zero_grads();

  const tk::OwnedBatch batch(tokens.B, tokens.T, tokens.ids);  // each row one document
  // Every target counts, so 1/(B*T) per token makes these the gradients of the mean loss.
  tk::LossSum loss = model.forward_backward(batch.batch(), 1.0f / float(tokens.B * tokens.T));
  std::vector<float> grads = model.grads_f32();
  float mean = float(loss.mean());
  std::vector<float> logits = cached_logits(model, tokens);

  tk::SafeTensorsWriter w;
  for (const tk::ParamInfo& p : model.layout().params)
    w.add_borrowed(p.name, "F32", p.shape, grads.data() + p.offset, size_t(p.numel) * sizeof(float));
  w.add_f32("loss", {1}, &mean);
  w.add_borrowed("logits", "F32", {tokens.B, tokens.T, cfg.vocab_size}, logits.data(), logits.size() * sizeof(float));
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
                             app.add_option("--tokens", o->tokens, "JSON file {\"tokens\": [[...], ...]}, B rows of T+1")
                                 ->required();
                             app.add_option("--out", o->out, "safetensors file for the gradients, \"loss\" and \"logits\"")
                                 ->required();
                             app.add_option("--device", o->device, "Backend")
                                 ->check(CLI::IsMember({"cpu", "cuda"}))
                                 ->capture_default_str();
                             return [o] { return run_grads(*o); };
                           });

}  // namespace
