// `tokamak generate`: a sample of text from a trained model (KV-cached decoding with temperature,
// top-k and top-p sampling), printed as it is produced: the quickest look at what a model learned.
#include <chrono>
#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "cli/command.h"
#include "cli/conventions.h"
#include "core/error.h"
#include "core/log.h"
#include "data/tokenizer.h"
#include "io/hf.h"
#include "model/generate.h"
#include "ops/backend.h"
#include "train/model_source.h"

namespace {

struct GenerateArgs {
  std::string model, prompt, tokenizer, device = "auto";
  int max_new_tokens = 100;
  float temperature = 0.8f, top_p = 0.95f;
  int top_k = 50;
  uint64_t seed = 0;
};

// The length of the longest prefix of s that does not end inside a UTF-8 sequence: a token may carry
// only part of a character, which is printed once the rest arrives.
size_t complete_utf8_prefix(const std::string& s) {
  for (size_t back = 1; back <= 4 && back <= s.size(); back++) {
    const unsigned char c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back for the lead byte
    const size_t need = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return back >= need ? s.size() : s.size() - back;
  }
  return s.size();  // not UTF-8 at all: print the bytes as they are
}

// The model's weights on the device, in its act dtype, for as long as the generator reads them.
class DeviceWeights {
 public:
  DeviceWeights(tk::Ops& ops, const std::vector<float>& host) : ops_(ops) {
    const int64_t n = int64_t(host.size());
    tensor_ = tk::Tensor(ops.allocate(size_t(n) * tk::dtype_size(ops.act_dtype()), "weights"), ops.act_dtype(), {n});
    ops.upload_f32(tensor_, host.data());
  }
  ~DeviceWeights() { ops_.release(tensor_.data); }
  DeviceWeights(const DeviceWeights&) = delete;
  DeviceWeights& operator=(const DeviceWeights&) = delete;
  const tk::Tensor& tensor() const { return tensor_; }

 private:
  tk::Ops& ops_;
  tk::Tensor tensor_;
};

int run_generate(const GenerateArgs& a) {
  const tk::ModelSource source = tk::find_model_source(a.model);
  TK_CHECK(!source.weights_path.empty(),
           "{} has no weights (it is a preset or a bare config.json): generate from a checkpoint, a run directory "
           "or a Hugging Face model directory",
           a.model);
  const std::string tok_path = !a.tokenizer.empty() ? a.tokenizer : source.tokenizer_path;
  TK_CHECK(!tok_path.empty(), "no tokenizer is known for {}: pass --tokenizer PATH", a.model);
  const std::unique_ptr<tk::Tokenizer> tok = tk::Tokenizer::load(tok_path);
  const tk::ModelConfig& cfg = source.config;
  TK_CHECK(tok->vocab_size() <= cfg.vocab_size, "the tokenizer {} has vocab {} but the model has vocab {}", tok_path,
           tok->vocab_size(), cfg.vocab_size);
  TK_CHECK(a.max_new_tokens >= 1, "--max-new-tokens must be at least 1");

  // An empty prompt starts where every document starts: after an end-of-text token.
  std::vector<int32_t> prompt = tok->encode(a.prompt);
  if (prompt.empty()) prompt.push_back(tok->eot_id());
  TK_CHECK(int(prompt.size()) < cfg.max_seq, "the prompt is {} tokens: the model's context holds {}", prompt.size(),
           cfg.max_seq);
  tk::SamplingOptions s;
  s.temperature = a.temperature;
  s.top_k = a.top_k;
  s.top_p = a.top_p;
  s.seed = a.seed;
  s.stop_token = tok->eot_id();
  s.max_new_tokens = std::min(a.max_new_tokens, cfg.max_seq - int(prompt.size()));
  if (s.max_new_tokens < a.max_new_tokens)
    tk::log::warn("the model's context is {} tokens: generating {} new tokens, not {}", cfg.max_seq, s.max_new_tokens,
                  a.max_new_tokens);

  tk::Backend backend = tk::make_backend(a.device);
  const tk::ParamLayout layout = tk::ParamLayout::build(cfg);
  DeviceWeights weights(*backend.ops, tk::load_params(cfg, layout, source.weights_path));
  tk::Generator gen(cfg, layout, weights.tensor(), *backend.ops, int(prompt.size()) + s.max_new_tokens);

  fmt::print("{}", a.prompt);
  std::fflush(stdout);
  std::vector<int32_t> generated;
  size_t printed = 0;
  const auto start = std::chrono::steady_clock::now();
  gen.generate(prompt, s, [&](int32_t id) {
    if (id == tok->eot_id()) return false;
    generated.push_back(id);
    const std::string text = tok->decode(generated);
    const size_t ready = complete_utf8_prefix(text);
    if (ready > printed) {
      fmt::print("{}", text.substr(printed, ready - printed));
      std::fflush(stdout);
      printed = ready;
    }
    return true;
  });
  const std::string text = tok->decode(generated);
  fmt::print("{}\n", text.substr(std::min(printed, text.size())));
  std::fflush(stdout);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  tk::log::info("{} tokens in {:.2f}s ({:.1f} tokens/s) on {}", generated.size(), seconds,
                double(generated.size()) / std::max(seconds, 1e-9), backend.ops->name());
  return 0;
}

tk::cli::Runner setup_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  app.add_option("--model", a->model, "Checkpoint, run directory or Hugging Face model directory")->required();
  app.add_option("--prompt", a->prompt, "The text to continue (empty: start a new document)");
  app.add_option("--tokenizer", a->tokenizer, "Tokenizer (default: the one the checkpoint was trained with)");
  app.add_option("--max-new-tokens", a->max_new_tokens, "Tokens to generate at most")->capture_default_str();
  app.add_option("--temperature", a->temperature, "Sampling temperature (0: greedy)")->capture_default_str();
  app.add_option("--top-k", a->top_k, "Sample from the k most likely tokens (0: all)")->capture_default_str();
  app.add_option("--top-p", a->top_p, "Sample from the most likely tokens covering this probability")
      ->capture_default_str();
  app.add_option("--seed", a->seed, "Sampling seed")->capture_default_str();
  tk::cli::one_of(app.add_option("--device", a->device, "auto, cpu or cuda"), {"auto", "cpu", "cuda"})
      ->capture_default_str();
  return [a] { return run_generate(*a); };
}

tk::cli::Command generate_cmd("generate", "Sample text from a trained model", setup_generate);

}  // namespace
