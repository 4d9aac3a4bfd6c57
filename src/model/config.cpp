// ModelConfig: the presets, Hugging Face config.json parsing and writing, validation, and the
// parameter and FLOP counts every report uses. Parsing refuses whatever the engine would not train
// exactly (RoPE scalings other than linear and llama3, sliding windows, MLP biases, ...), naming the field, so
// that a model is never silently different from the one its config.json describes.
#include "model/config.h"

#include <climits>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/checked.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/json_integer.h"
#include "model/config_keys.h"
#include "ops/ops.h"

namespace tk {

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::Llama: return "llama";
    case Arch::Qwen2: return "qwen2";
    case Arch::Qwen3: return "qwen3";
  }
  return "?";
}

const char* arch_hf_class(Arch a) {
  switch (a) {
    case Arch::Llama: return "LlamaForCausalLM";
    case Arch::Qwen2: return "Qwen2ForCausalLM";
    case Arch::Qwen3: return "Qwen3ForCausalLM";
  }
  return "?";
}

// ---- limits ---------------------------------------------------------------------------------------

namespace {

// The largest size of each kind that tokamak accepts: some 16-60 times the largest models trained
// anywhere (hidden sizes to 16384, 126 layers, 128 heads, vocabularies to 256k). A value beyond is a
// corrupt or mistyped file; refusing it keeps every product of sizes (parameter counts, byte sizes,
// the ops' int widths) far from overflowing.
constexpr int64_t kMaxVocab = int64_t(1) << 24;
constexpr int64_t kMaxHidden = int64_t(1) << 18;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxHeads = int64_t(1) << 14;
constexpr int64_t kMaxHeadDim = 4096;
constexpr int64_t kMaxFfn = int64_t(1) << 20;
constexpr int64_t kMaxPositions = INT_MAX;
// The largest rms_norm_eps: 1000 times the usual 1e-5. rms_norm_eps 1 or 2^31 is a corrupt or mistyped file.
constexpr double kMaxNormEps = 1e-2;

}  // namespace

// ---- counts ---------------------------------------------------------------------------------------
// Checked arithmetic: validate() bounds every size, so an overflow here means a config that was never
// validated, and it is an error rather than a wrapped count.

int64_t ModelConfig::matmul_params() const {
  const char* what = "the matmul parameter count";
  auto mul = [&](int64_t a, int64_t b) { return checked_mul(a, b, what); };
  auto add = [&](int64_t a, int64_t b) { return checked_add(a, b, what); };
  const int64_t d = d_model, q = q_dim(), k = kv_dim(), f = ffn_dim;
  const int64_t per_layer = add(add(mul(d, q), mul(2 * d, k)), add(mul(q, d), mul(3 * d, f)));
  return add(mul(n_layers, per_layer), mul(d, vocab_size));
}

int64_t ModelConfig::total_params() const {
  const char* what = "the parameter count";
  auto mul = [&](int64_t a, int64_t b) { return checked_mul(a, b, what); };
  auto add = [&](int64_t a, int64_t b) { return checked_add(a, b, what); };
  const int64_t d = d_model, q = q_dim(), k = kv_dim();
  int64_t per_layer = add(add(2 * d, mul(d, q)), add(mul(2 * d, k), add(mul(q, d), mul(3 * d, ffn_dim))));
  if (qkv_bias) per_layer = add(per_layer, qkv_dim());
  if (o_bias) per_layer = add(per_layer, d);
  if (qk_norm) per_layer = add(per_layer, 2 * int64_t(head_dim));
  const int64_t embeddings = mul(mul(vocab_size, d), tied_embeddings ? 1 : 2);
  return add(add(embeddings, mul(n_layers, per_layer)), d);
}

RopeSpec ModelConfig::rope() const { return {rope_inv_freq(rope_theta, head_dim, rope_scaling)}; }

double ModelConfig::flops_per_token(int T) const {
  return 6.0 * double(matmul_params()) + 6.0 * n_layers * double(T) * q_dim();
}

// ---- validation -----------------------------------------------------------------------------------

void ModelConfig::validate() const {
  const std::string& src = name;
  auto size = [&](int64_t v, const char* field, int64_t max) {
    TK_CHECK(v > 0 && v <= max, "model {}: {} is {}; it must be from 1 to {}", src, field, v, max);
  };
  size(vocab_size, "vocab_size", kMaxVocab);
  size(d_model, "hidden_size", kMaxHidden);
  size(n_layers, "num_hidden_layers", kMaxLayers);
  size(n_heads, "num_attention_heads", kMaxHeads);
  size(n_kv_heads, "num_key_value_heads", kMaxHeads);
  size(head_dim, "head_dim", kMaxHeadDim);
  size(ffn_dim, "intermediate_size", kMaxFfn);
  size(max_seq, "max_position_embeddings", kMaxPositions);
  TK_CHECK(n_heads % n_kv_heads == 0, "model {}: num_attention_heads {} is not a multiple of num_key_value_heads {}",
           src, n_heads, n_kv_heads);
  TK_CHECK(head_dim % 2 == 0, "model {}: head_dim {} must be even for rotary position embeddings", src, head_dim);
  TK_CHECK(rope_theta > 0, "model {}: rope_theta must be positive, got {}", src, rope_theta);
  TK_CHECK(norm_eps > 0 && norm_eps <= kMaxNormEps,
           "model {}: rms_norm_eps is {}; it must be above 0 and at most {} (it is added to each mean square before "
           "the root, 1e-6 to 1e-5 in every published model: a larger one would outweigh the activations)",
           src, norm_eps, kMaxNormEps);
  TK_CHECK(init_std > 0, "model {}: initializer_range must be positive, got {}", src, init_std);
  TK_CHECK(bos_id < vocab_size && eos_id < vocab_size, "model {}: bos/eos token ids ({}, {}) lie outside the vocabulary of {}",
           src, bos_id, eos_id, vocab_size);
  // What each Hugging Face class can express: anything else could not be exported faithfully.
  switch (arch) {
    case Arch::Llama:
    case Arch::Qwen3:
      TK_CHECK(qkv_bias == o_bias, "model {}: {} has one attention_bias for q/k/v and o_proj together", src,
               arch_hf_class(arch));
      break;
    case Arch::Qwen2:
      TK_CHECK(qkv_bias && !o_bias, "model {}: Qwen2 always has q/k/v biases and no o_proj bias", src);
      break;
  }
  TK_CHECK(qk_norm == (arch == Arch::Qwen3), "model {}: q/k norms are what Qwen3 adds; {} has {}", src, arch_name(arch),
           qk_norm ? "them set" : "them unset");
  if (arch != Arch::Qwen3)
    TK_CHECK(d_model % n_heads == 0, "model {}: hidden_size {} is not a multiple of num_attention_heads {}", src,
             d_model, n_heads);
}

// ---- presets --------------------------------------------------------------------------------------

namespace {

struct Preset {
  const char* name;
  Arch arch;
  int vocab, d, layers, heads, kv_heads, head_dim, ffn, max_seq;
  double rope_theta, eps;
  bool tied;
  int bos, eos;
  RopeScaling rope_scaling = {};
};

// Llama 3.2's and Llama 3.1's rope_scaling, as their config.json files give it.
constexpr RopeScaling kLlama32Rope{RopeScaling::Type::Llama3, 32.0, 1.0, 4.0, 8192};
constexpr RopeScaling kLlama31Rope{RopeScaling::Type::Llama3, 8.0, 1.0, 4.0, 8192};

// The real Hugging Face shapes, with Llama 3.x's RoPE scaling, so that the released weights load into
// them. "tiny" is the CPU demo (~16M parameters, most of them the GPT-2 vocabulary's embedding);
// "gpt2-small-llama" is GPT-2 small's size as a Llama, the shape of the PyTorch peer benchmark.
constexpr Preset kPresets[] = {
    {"tiny", Arch::Llama, 50257, 256, 4, 4, 2, 64, 704, 256, 10000.0, 1e-5, true, 50256, 50256},
    {"gpt2-small-llama", Arch::Llama, 50304, 768, 12, 12, 12, 64, 2048, 1024, 10000.0, 1e-5, true, 50256, 50256},
    {"qwen2.5-0.5b", Arch::Qwen2, 151936, 896, 24, 14, 2, 64, 4864, 32768, 1e6, 1e-6, true, 151643, 151643},
    {"llama3.2-1b", Arch::Llama, 128256, 2048, 16, 32, 8, 64, 8192, 131072, 500000.0, 1e-5, true, 128000, 128001,
     kLlama32Rope},
    {"qwen2.5-1.5b", Arch::Qwen2, 151936, 1536, 28, 12, 2, 128, 8960, 131072, 1e6, 1e-6, true, 151643, 151643},
    {"llama3.2-3b", Arch::Llama, 128256, 3072, 28, 24, 8, 128, 8192, 131072, 500000.0, 1e-5, true, 128000, 128001,
     kLlama32Rope},
    {"qwen2.5-7b", Arch::Qwen2, 152064, 3584, 28, 28, 4, 128, 18944, 131072, 1e6, 1e-6, false, 151643, 151643},
    {"llama3.1-8b", Arch::Llama, 128256, 4096, 32, 32, 8, 128, 14336, 131072, 500000.0, 1e-5, false, 128000, 128001,
     kLlama31Rope},
};

ModelConfig from_preset(const Preset& p) {
  ModelConfig c;
  c.name = p.name;
  c.arch = p.arch;
  c.vocab_size = p.vocab;
  c.d_model = p.d;
  c.n_layers = p.layers;
  c.n_heads = p.heads;
  c.n_kv_heads = p.kv_heads;
  c.head_dim = p.head_dim;
  c.ffn_dim = p.ffn;
  c.max_seq = p.max_seq;
  c.rope_theta = p.rope_theta;
  c.rope_scaling = p.rope_scaling;
  c.norm_eps = p.eps;
  c.tied_embeddings = p.tied;
  c.qkv_bias = p.arch == Arch::Qwen2;
  c.qk_norm = p.arch == Arch::Qwen3;
  c.bos_id = p.bos;
  c.eos_id = p.eos;
  return c;
}

}  // namespace

std::vector<std::string> ModelConfig::preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.push_back(p.name);
  return names;
}

ModelConfig ModelConfig::preset(const std::string& name) {
  for (const Preset& p : kPresets)
    if (name == p.name) return from_preset(p);
  fail("unknown model preset '{}'; the presets are: {}", name, fmt::join(preset_names(), ", "));
}

// ---- Hugging Face config.json -----------------------------------------------------------------------

namespace {

using nlohmann::json;

bool has(const json& j, const char* key) { return j.contains(key) && !j.at(key).is_null(); }

// Integers go through json_integer: nlohmann's get<int>() would truncate 64.5 and wrap 4294967808.
template <class T>
T get(const json& j, const char* key, const std::string& src) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    return json_integer<T>(j.at(key), src, key);
  } else {
    try {
      return j.at(key).get<T>();
    } catch (const json::exception&) {
      fail("{}: field '{}' has the value {}, which is not the expected type", src, key, j.at(key).dump());
    }
  }
}

// A size of the model: an integer from 1 to `max` (the limits above).
int required_size(const json& j, const char* key, int64_t max, const std::string& src) {
  TK_CHECK(has(j, key), "{}: the required field '{}' is missing", src, key);
  return int(json_int64(j.at(key), src, key, 1, max));
}

int optional_size(const json& j, const char* key, int fallback, int64_t max, const std::string& src) {
  return has(j, key) ? int(json_int64(j.at(key), src, key, 1, max)) : fallback;
}

template <class T>
T optional(const json& j, const char* key, T fallback, const std::string& src) {
  return has(j, key) ? get<T>(j, key, src) : fallback;
}

// The architecture, from the class `architectures` names (or model_type alone). A model_type beside it must be the
// class's own: transformers picks the config class by model_type, so a file whose two disagree is not one it loads.
Arch parse_arch(const json& j, const std::string& src) {
  std::string cls;
  if (has(j, "architectures")) {
    const json& a = j.at("architectures");
    TK_CHECK(a.is_array() && a.size() == 1 && a[0].is_string(),
             "{}: 'architectures' should list exactly one class name, got {}", src, a.dump());
    cls = a[0].get<std::string>();
    for (Arch arch : {Arch::Llama, Arch::Qwen2, Arch::Qwen3}) {
      if (cls != arch_hf_class(arch)) continue;
      if (has(j, "model_type")) {
        const std::string type = get<std::string>(j, "model_type", src);
        TK_CHECK(type == arch_name(arch),
                 "{}: model_type '{}' does not name the architecture {} (whose model_type is '{}'): transformers "
                 "chooses the config class by model_type and would not load this file",
                 src, type, cls, arch_name(arch));
      }
      return arch;
    }
  } else {
    TK_CHECK(has(j, "model_type"), "{}: neither 'architectures' nor 'model_type' says what model this is", src);
    std::string type = get<std::string>(j, "model_type", src);
    for (Arch a : {Arch::Llama, Arch::Qwen2, Arch::Qwen3})
      if (type == arch_name(a)) return a;
    fail("{}: model_type '{}' is not supported; tokamak trains llama, qwen2 and qwen3 models", src, type);
  }
  for (Arch a : {Arch::Llama, Arch::Qwen2, Arch::Qwen3})
    if (cls == arch_hf_class(a)) return a;
  fail("{}: architecture '{}' is not supported; tokamak trains LlamaForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM",
       src, cls);
}

// rope_theta and the scaling: rope_scaling (transformers 4.x) or rope_parameters (5.x, which holds
// rope_theta too); a scaling the engine does not implement is refused by RopeScaling::from_hf_json.
void parse_rope(const json& j, const std::string& src, ModelConfig& c) {
  c.rope_theta = optional<double>(j, "rope_theta", 10000.0, src);
  if (has(j, "rope_scaling")) c.rope_scaling = RopeScaling::from_hf_json(j.at("rope_scaling"), src);
  if (has(j, "rope_parameters")) {
    const json& p = j.at("rope_parameters");
    TK_CHECK(p.is_object(), "{}: rope_parameters should be an object, got {}", src, p.dump());
    c.rope_scaling = RopeScaling::from_hf_json(p, src + " rope_parameters");
    c.rope_theta = optional<double>(p, "rope_theta", c.rope_theta, src + " rope_parameters");
  }
}

// Sliding-window attention (Qwen2/Qwen3 options) and per-layer attention types: full causal only.
void reject_sliding_windows(const json& j, const std::string& src) {
  TK_CHECK(!optional<bool>(j, "use_sliding_window", false, src),
           "{}: use_sliding_window is true; tokamak implements full causal attention only", src);
  if (has(j, "layer_types")) {
    for (const json& t : j.at("layer_types"))
      TK_CHECK(t == "full_attention", "{}: layer_types contains {}; tokamak implements full_attention layers only", src,
               t.dump());
  }
}

void reject_unsupported_options(const json& j, const std::string& src) {
  std::string act = optional<std::string>(j, "hidden_act", "silu", src);
  TK_CHECK(act == "silu", "{}: hidden_act is '{}'; tokamak's MLP is SwiGLU (hidden_act silu)", src, act);
  TK_CHECK(!optional<bool>(j, "mlp_bias", false, src), "{}: mlp_bias is true; tokamak's MLP has no biases", src);
  TK_CHECK(optional<double>(j, "attention_dropout", 0.0, src) == 0.0,
           "{}: attention_dropout is {}; tokamak trains without dropout", src, j.at("attention_dropout").dump());
  TK_CHECK(!optional<bool>(j, "use_mrope", false, src), "{}: use_mrope is true; tokamak implements 1-D RoPE only", src);
  reject_sliding_windows(j, src);
}

// eos_token_id may be a number, a list (the first is the end of a document), or absent.
int parse_token_id(const json& j, const char* key, const std::string& src) {
  if (!has(j, key)) return -1;
  const json& v = j.at(key);
  if (v.is_array()) return v.empty() ? -1 : json_integer<int>(v[0], src, std::string(key) + "[0]", 0);
  return json_integer<int>(v, src, key, 0);
}

}  // namespace

ModelConfig ModelConfig::from_hf_json(const nlohmann::json& j, const std::string& source) {
  TK_CHECK(j.is_object(), "{}: a config.json must hold a JSON object", source);
  warn_unknown_config_keys(j, source);
  ModelConfig c;
  c.name = source;
  c.arch = parse_arch(j, source);
  reject_unsupported_options(j, source);
  c.vocab_size = required_size(j, "vocab_size", kMaxVocab, source);
  c.d_model = required_size(j, "hidden_size", kMaxHidden, source);
  c.n_layers = required_size(j, "num_hidden_layers", kMaxLayers, source);
  c.n_heads = required_size(j, "num_attention_heads", kMaxHeads, source);
  c.n_kv_heads = optional_size(j, "num_key_value_heads", c.n_heads, kMaxHeads, source);
  c.ffn_dim = required_size(j, "intermediate_size", kMaxFfn, source);
  // Qwen3Config defaults head_dim to 128; Llama and Qwen2 derive it from the width.
  int derived_head_dim = c.n_heads > 0 ? c.d_model / c.n_heads : 0;
  c.head_dim = optional_size(j, "head_dim", c.arch == Arch::Qwen3 ? 128 : derived_head_dim, kMaxHeadDim, source);
  c.max_seq = optional_size(j, "max_position_embeddings", c.arch == Arch::Llama ? 2048 : 32768, kMaxPositions, source);
  parse_rope(j, source, c);
  c.norm_eps = optional<double>(j, "rms_norm_eps", 1e-6, source);
  c.tied_embeddings = optional<bool>(j, "tie_word_embeddings", false, source);
  bool attention_bias = optional<bool>(j, "attention_bias", false, source);
  if (c.arch == Arch::Qwen2) {
    TK_CHECK(!attention_bias, "{}: attention_bias is not a Qwen2 option (Qwen2 always has q/k/v biases)", source);
    c.qkv_bias = true;
  } else {
    c.qkv_bias = c.o_bias = attention_bias;
  }
  c.qk_norm = c.arch == Arch::Qwen3;
  c.bos_id = parse_token_id(j, "bos_token_id", source);
  c.eos_id = parse_token_id(j, "eos_token_id", source);
  c.init_std = optional<double>(j, "initializer_range", 0.02, source);
  c.validate();
  return c;
}

nlohmann::json ModelConfig::to_hf_json() const {
  json j = {
      {"architectures", {arch_hf_class(arch)}},
      {"model_type", arch_name(arch)},
      {"vocab_size", vocab_size},
      {"hidden_size", d_model},
      {"intermediate_size", ffn_dim},
      {"num_hidden_layers", n_layers},
      {"num_attention_heads", n_heads},
      {"num_key_value_heads", n_kv_heads},
      {"head_dim", head_dim},
      {"hidden_act", "silu"},
      {"max_position_embeddings", max_seq},
      {"rms_norm_eps", norm_eps},
      {"rope_theta", rope_theta},
      {"tie_word_embeddings", tied_embeddings},
      {"initializer_range", init_std},
      {"attention_dropout", 0.0},
      {"use_cache", true},
      {"torch_dtype", "bfloat16"},
      {"bos_token_id", bos_id >= 0 ? json(bos_id) : json(nullptr)},
      {"eos_token_id", eos_id >= 0 ? json(eos_id) : json(nullptr)},
  };
  if (rope_scaling.type != RopeScaling::Type::None) j["rope_scaling"] = rope_scaling.to_hf_json();
  if (arch == Arch::Qwen2) {
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
    j["max_window_layers"] = n_layers;
  } else {
    j["attention_bias"] = qkv_bias;
  }
  if (arch == Arch::Llama) {
    j["mlp_bias"] = false;
    j["pretraining_tp"] = 1;
  }
  if (arch == Arch::Qwen3) {
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
    j["max_window_layers"] = n_layers;
  }
  return j;
}

ModelConfig ModelConfig::resolve(const std::string& spec) {
  for (const Preset& p : kPresets)
    if (spec == p.name) return from_preset(p);
  namespace stdfs = std::filesystem;
  std::error_code ec;
  stdfs::path path = spec;
  if (stdfs::is_directory(path, ec)) path /= "config.json";
  TK_CHECK(stdfs::is_regular_file(path, ec),
           "'{}' is neither a model preset ({}) nor a config.json nor a directory holding one", spec,
           fmt::join(preset_names(), ", "));
  json j;
  try {
    j = json::parse(fs::read_file(path.string()));
  } catch (const json::exception& e) {
    fail("{} is not valid JSON: {}", path.string(), e.what());
  }
  ModelConfig c = from_hf_json(j, path.string());
  c.name = spec;
  return c;
}

}  // namespace tk
