// `tokamak generate`: samples of text from a trained model (KV-cached decoding with temperature, top-k and top-p
// sampling, stop strings), printed as they are produced: the quickest look at what a model learned. With --chat the
// prompt is a user's message, put through the model's chat template with the generation prompt, and the reply ends
// at the end-of-turn token.
#include <chrono>
#include <cstdio>
#include <memory>
#include <algorithm>
#include <optional>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "model/generate.h"
#include "backend/backend.h"
#include "cli/command.h"
#include "cli/conventions.h"
#include "core/error.h"
#include "core/log.h"
#include "data/chat_template/chat_template.h"
#include "data/generated_text.h"
#include "data/tokenizer.h"
#include "io/hf.h"
#include "train/model_source.h"

namespace {

struct GenerateArgs {
  std::string model, prompt, tokenizer, device = "auto";
  bool chat = false;
  std::string system, chat_template;
  std::vector<std::string> stops;
  int max_new_tokens = 100, num_samples = 1;
  float temperature = 0.8f, top_p = 0.95f;
  int top_k = 50;
  uint64_t seed = 0;
};

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

// One continuation of the prompt, printed as it is generated, up to the end of text or a stop string; returns
// the tokens generated.
int64_t print_sample(tk::Generator& gen, const tk::Tokenizer& tok, const std::vector<int32_t>& prompt,
                     const std::string& prompt_text, const tk::SamplingOptions& s,
                     const std::vector<std::string>& stops, const std::vector<int32_t>& end_of_turn) {
  fmt::print("{}", prompt_text);
  std::fflush(stdout);
  tk::GeneratedText text(tok, stops);
  gen.generate(prompt, s, [&](int32_t id) {
    if (id == tok.eot_id() || std::count(end_of_turn.begin(), end_of_turn.end(), id)) return false;
    fmt::print("{}", text.add(id));
    std::fflush(stdout);
    return !text.stopped();
  });
  fmt::print("{}\n", text.rest());
  std::fflush(stdout);
  return int64_t(text.tokens().size());
}

// --chat: the prompt as the user's turn (after --system's), rendered with the generation prompt; and the tokens that
// end the assistant's turn: the template's eos_token, and the first token the template prints after a reply.
struct ChatPrompt {
  std::string text;
  std::vector<int32_t> end_of_turn;
};

ChatPrompt chat_prompt(const GenerateArgs& a, const tk::Tokenizer& tok, const std::string& tok_path) {
  using ojson = nlohmann::ordered_json;
  const std::optional<tk::ChatTemplate> t =
      !a.chat_template.empty() ? std::optional<tk::ChatTemplate>(tk::ChatTemplate::load_file(a.chat_template))
                               : tk::ChatTemplate::find_for_tokenizer(tok_path);
  TK_CHECK(t, "--chat needs a chat template, and the tokenizer {} has none: give one with --chat-template FILE",
           tok_path);
  ojson messages = ojson::array();
  if (!a.system.empty()) messages.push_back({{"role", "system"}, {"content", a.system}});
  messages.push_back({{"role", "user"}, {"content", a.prompt}});
  tk::ChatInputs in;
  in.messages = messages;
  in.add_generation_prompt = true;
  ChatPrompt p{t->render(in).text, {}};
  auto single = [&](const std::string& text) {
    const std::vector<int32_t> ids = tok.encode(text, true);
    if (!ids.empty()) p.end_of_turn.push_back(ids[0]);
  };
  if (t->special_tokens().contains("eos_token")) {
    const std::vector<int32_t> ids = tok.encode(t->special_tokens()["eos_token"].get<std::string>(), true);
    if (ids.size() == 1) p.end_of_turn.push_back(ids[0]);
  }
  const std::string reply = "tokamak";
  in.add_generation_prompt = false;
  in.messages.push_back({{"role", "assistant"}, {"content", reply}});
  try {
    const std::string whole = t->render(in).text;
    const size_t at = whole.rfind(reply);
    if (at != std::string::npos && at + reply.size() < whole.size()) single(whole.substr(at + reply.size()));
  } catch (const tk::Error&) {
    // A template that refuses a reply after one user turn still has its eos_token.
  }
  TK_CHECK(!p.end_of_turn.empty(), "cannot tell which token ends the assistant's turn in {}'s chat template", tok_path);
  return p;
}

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
  std::optional<ChatPrompt> chat;
  if (a.chat) chat = chat_prompt(a, *tok, tok_path);
  std::vector<int32_t> prompt = chat ? tok->encode(chat->text, true) : tok->encode(a.prompt);
  if (prompt.empty()) prompt.push_back(tok->eot_id());
  TK_CHECK(int(prompt.size()) < cfg.max_seq, "the prompt is {} tokens: the model's context holds {}", prompt.size(),
           cfg.max_seq);
  tk::SamplingOptions s;
  s.temperature = a.temperature;
  s.top_k = a.top_k;
  s.top_p = a.top_p;
  s.seed = a.seed;
  s.stop_token = tok->eot_id();
  s.vocab_limit = tok->vocab_size();  // a padded vocabulary's extra rows are no token
  s.max_new_tokens = std::min(a.max_new_tokens, cfg.max_seq - int(prompt.size()));
  if (s.max_new_tokens < a.max_new_tokens)
    tk::log::warn("the model's context is {} tokens: generating {} new tokens, not {}", cfg.max_seq, s.max_new_tokens,
                  a.max_new_tokens);

  tk::Backend backend = tk::make_backend(a.device);
  const tk::ParamLayout layout = tk::ParamLayout::build(cfg);
  DeviceWeights weights(*backend.ops, tk::load_params(cfg, layout, source.weights_path));
  tk::Generator gen(cfg, layout, weights.tensor(), *backend.ops, int(prompt.size()) + s.max_new_tokens);

  std::vector<std::string> stops;
  for (const std::string& typed : a.stops) stops.push_back(tk::unescape_typed(typed));
  int64_t tokens = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < a.num_samples; i++) {
    s.seed = a.seed + uint64_t(i);  // sample i is what --seed SEED+i gives alone
    if (a.num_samples > 1)
      fmt::print("{}--- sample {} of {} (seed {}) ---\n", i > 0 ? "\n" : "", i + 1, a.num_samples, s.seed);
    tokens += print_sample(gen, *tok, prompt, chat ? "" : a.prompt, s, stops,
                           chat ? chat->end_of_turn : std::vector<int32_t>());
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  tk::log::info("{} tokens in {:.2f}s ({:.1f} tokens/s) on {}", tokens, seconds,
                double(tokens) / std::max(seconds, 1e-9), backend.ops->name());
  return 0;
}

tk::cli::Runner setup_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  app.add_option("--model", a->model, "Checkpoint, run directory or Hugging Face model directory")->required();
  app.add_option("--prompt", a->prompt, "The text to continue (empty: start a new document)");
  app.add_option("--tokenizer", a->tokenizer, "Tokenizer (default: the one the checkpoint was trained with)");
  app.add_flag("--chat", a->chat,
               "The prompt is a user's message: apply the chat template with the generation prompt, print the reply, "
               "stop at the end of the assistant's turn");
  app.add_option("--system", a->system, "With --chat: a system message before the user's");
  app.add_option("--chat-template", a->chat_template,
                 "With --chat: a .jinja file or tokenizer_config.json (default: the tokenizer's own)");
  app.add_option("--max-new-tokens", a->max_new_tokens, "Tokens to generate at most")->capture_default_str();
  app.add_option("--temperature", a->temperature, "Sampling temperature (0: greedy)")->capture_default_str();
  app.add_option("--top-k", a->top_k, "Sample from the k most likely tokens (0: all)")->capture_default_str();
  app.add_option("--top-p", a->top_p, "Sample from the most likely tokens covering this probability")
      ->capture_default_str();
  app.add_option("--seed", a->seed, "Sampling seed (sample i of --num-samples takes SEED + i)")->capture_default_str();
  app.add_option("--num-samples", a->num_samples, "Continuations of the prompt, one after the other")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--stop", a->stops,
                 "End a sample where its text contains this string, which is not printed; repeatable (\\n and \\t are a "
                 "newline and a tab)")
      ->allow_extra_args(false);
  tk::cli::one_of(app.add_option("--device", a->device, "auto, cpu or cuda"), {"auto", "cpu", "cuda"})
      ->capture_default_str();
  return [a] { return run_generate(*a); };
}

tk::cli::Command generate_cmd("generate", "Sample text from a trained model", setup_generate);

}  // namespace
