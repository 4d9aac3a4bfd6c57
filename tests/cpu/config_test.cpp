// ModelConfig: preset shapes against the real models' parameter counts, Hugging Face config.json
// parsing for Llama, Qwen2 and Qwen3 (as the Hub ships them), the errors for what the engine cannot
// train, the config.json round trip, resolve(), and the FLOP count of docs/design.md.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config.h"

namespace tk {
namespace {

using nlohmann::json;

// The config.json files of the Hub models (trimmed of nothing that matters to the shape).
const char* kLlama32_1B = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
  "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8, "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})";

const char* kQwen25_05B = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
  "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24,
  "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": true, "use_sliding_window": false,
  "vocab_size": 151936})";

const char* kQwen3_06B = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
  "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
  "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
  "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936})";

json llama_without_rope_scaling() {
  json j = json::parse(kLlama32_1B);
  j.erase("rope_scaling");
  return j;
}

// The message of the tk::Error that parsing `j` throws ("" if it parses).
std::string parse_error(const json& j) {
  try {
    ModelConfig::from_hf_json(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Presets, ParameterCountsMatchTheRealModels) {
  EXPECT_EQ(ModelConfig::preset("qwen2.5-0.5b").total_params(), 494032768);
  EXPECT_EQ(ModelConfig::preset("llama3.2-1b").total_params(), 1235814400);
  EXPECT_EQ(ModelConfig::preset("qwen2.5-1.5b").total_params(), 1543714304);
  EXPECT_EQ(ModelConfig::preset("llama3.2-3b").total_params(), 3212749824);
  EXPECT_EQ(ModelConfig::preset("qwen2.5-7b").total_params(), 7615616512);
  EXPECT_EQ(ModelConfig::preset("llama3.1-8b").total_params(), 8030261248);
  // GPT-2 small as a Llama: 50304*768 embedding + 12 * 7,079,424 per layer + 768 final norm.
  EXPECT_EQ(ModelConfig::preset("gpt2-small-llama").total_params(), 123587328);
}

TEST(Presets, AllValidateAndTheTinyOneFitsTheCpuDemo) {
  for (const std::string& name : ModelConfig::preset_names()) {
    ModelConfig c = ModelConfig::preset(name);
    EXPECT_NO_THROW(c.validate()) << name;
    EXPECT_EQ(c.name, name);
  }
  ModelConfig tiny = ModelConfig::preset("tiny");
  EXPECT_EQ(tiny.vocab_size, 50257);
  EXPECT_GT(tiny.total_params(), 5'000'000);
  EXPECT_LT(tiny.total_params(), 20'000'000);
  EXPECT_LT(tiny.n_kv_heads, tiny.n_heads);  // the demo exercises GQA
}

TEST(Presets, ArchitectureDetails) {
  ModelConfig q = ModelConfig::preset("qwen2.5-7b");
  EXPECT_EQ(q.arch, Arch::Qwen2);
  EXPECT_TRUE(q.qkv_bias);
  EXPECT_FALSE(q.o_bias);
  EXPECT_FALSE(q.tied_embeddings);
  EXPECT_EQ(q.rope_theta, 1e6);
  EXPECT_EQ(q.norm_eps, 1e-6);
  ModelConfig l = ModelConfig::preset("llama3.2-3b");
  EXPECT_EQ(l.arch, Arch::Llama);
  EXPECT_FALSE(l.qkv_bias);
  EXPECT_TRUE(l.tied_embeddings);
  EXPECT_EQ(l.rope_theta, 500000.0);
  EXPECT_EQ(l.norm_eps, 1e-5);
  EXPECT_EQ(l.head_dim, 128);
}

TEST(Presets, UnknownNameListsThePresets) {
  try {
    ModelConfig::preset("llama-7b");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("qwen2.5-0.5b"), std::string::npos) << e.what();
  }
}

TEST(FlopsPerToken, MatchesDesignFormulaByHand) {
  // llama3.2-1b at T = 2048: d 2048, q 2048, k 512, f 8192, L 16, V 128256.
  // N_matmul = 16 * (2048*2048 + 2*2048*512 + 2048*2048 + 3*2048*8192) + 2048*128256
  //          = 16 * 60,817,408 + 262,668,288 = 1,235,746,816
  // FLOPs    = 6 * 1,235,746,816 + 6 * 16 * 2048 * 2048 = 7,414,480,896 + 402,653,184
  ModelConfig c = ModelConfig::preset("llama3.2-1b");
  EXPECT_EQ(c.matmul_params(), 1235746816);
  EXPECT_DOUBLE_EQ(c.flops_per_token(2048), 7817134080.0);
  // Attention grows with T: twice the context adds another 6*L*T*q.
  EXPECT_DOUBLE_EQ(c.flops_per_token(4096) - c.flops_per_token(2048), 402653184.0);
}

TEST(HfConfig, ParsesLlama) {
  ModelConfig c = ModelConfig::from_hf_json(llama_without_rope_scaling(), "llama/config.json");
  EXPECT_EQ(c.arch, Arch::Llama);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.d_model, 2048);
  EXPECT_EQ(c.n_layers, 16);
  EXPECT_EQ(c.n_heads, 32);
  EXPECT_EQ(c.n_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.ffn_dim, 8192);
  EXPECT_EQ(c.max_seq, 131072);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.norm_eps, 1e-5);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.bos_id, 128000);
  EXPECT_EQ(c.eos_id, 128001);
  EXPECT_EQ(c.total_params(), 1235814400);
}

TEST(HfConfig, ParsesQwen2WithBiases) {
  ModelConfig c = ModelConfig::from_hf_json(json::parse(kQwen25_05B));
  EXPECT_EQ(c.arch, Arch::Qwen2);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_EQ(c.head_dim, 64);  // derived: 896 / 14
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.norm_eps, 1e-6);
  EXPECT_EQ(c.total_params(), 494032768);
}

TEST(HfConfig, ParsesQwen3WithQkNormAndIndependentHeadDim) {
  ModelConfig c = ModelConfig::from_hf_json(json::parse(kQwen3_06B));
  EXPECT_EQ(c.arch, Arch::Qwen3);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.q_dim(), 2048);  // wider than hidden_size 1024
  EXPECT_EQ(c.eos_id, 151645);
  // Qwen3-0.6B has 596,049,920 parameters (tied).
  EXPECT_EQ(c.total_params(), 596049920);
}

TEST(HfConfig, AttentionBiasAddsQkvAndOutputBiases) {
  json j = json::parse(kQwen3_06B);
  j["attention_bias"] = true;
  ModelConfig c = ModelConfig::from_hf_json(j);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_TRUE(c.o_bias);
  json l = llama_without_rope_scaling();
  l["attention_bias"] = true;
  ModelConfig cl = ModelConfig::from_hf_json(l);
  EXPECT_TRUE(cl.qkv_bias && cl.o_bias);
}

TEST(HfConfig, DefaultsAsTransformersHasThem) {
  json j = llama_without_rope_scaling();
  for (const char* k : {"num_key_value_heads", "head_dim", "tie_word_embeddings", "rope_theta", "rms_norm_eps"}) j.erase(k);
  ModelConfig c = ModelConfig::from_hf_json(j);
  EXPECT_EQ(c.n_kv_heads, c.n_heads);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.norm_eps, 1e-6);
  // eos_token_id as a list (instruct models): the first id ends a document.
  j["eos_token_id"] = {128001, 128008, 128009};
  EXPECT_EQ(ModelConfig::from_hf_json(j).eos_id, 128001);
}

TEST(HfConfig, TransformersV5RopeParameters) {
  json j = llama_without_rope_scaling();
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 250000.0}};
  EXPECT_EQ(ModelConfig::from_hf_json(j).rope_theta, 250000.0);
  EXPECT_EQ(ModelConfig::from_hf_json(j).rope_scaling, RopeScaling());
  j["rope_parameters"] = json::parse(kLlama32_1B)["rope_scaling"];
  j["rope_parameters"]["rope_theta"] = 500000.0;
  const ModelConfig v5 = ModelConfig::from_hf_json(j);
  EXPECT_EQ(v5.rope_theta, 500000.0);
  EXPECT_EQ(v5.rope_scaling, RopeScaling::llama3(32.0, 1.0, 4.0, 8192));
  j["rope_parameters"]["rope_type"] = "yarn";
  EXPECT_NE(parse_error(j).find("rope_parameters"), std::string::npos);
}

TEST(HfConfig, ParsesLlama3RopeScalingAsThePresetsHaveIt) {
  const ModelConfig c = ModelConfig::from_hf_json(json::parse(kLlama32_1B));
  EXPECT_EQ(c.rope_scaling, RopeScaling::llama3(32.0, 1.0, 4.0, 8192));
  EXPECT_EQ(ModelConfig::preset("llama3.2-1b").rope_scaling, c.rope_scaling);
  EXPECT_EQ(ModelConfig::preset("llama3.2-3b").rope_scaling, c.rope_scaling);
  EXPECT_EQ(ModelConfig::preset("llama3.1-8b").rope_scaling, RopeScaling::llama3(8.0, 1.0, 4.0, 8192));
  for (const char* name : {"tiny", "gpt2-small-llama", "qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b"})
    EXPECT_EQ(ModelConfig::preset(name).rope_scaling.type, RopeScaling::Type::None) << name;
  // The block written is the one Llama 3.2's config.json holds.
  EXPECT_EQ(ModelConfig::preset("llama3.2-1b").to_hf_json()["rope_scaling"], json::parse(kLlama32_1B)["rope_scaling"]);
  EXPECT_FALSE(ModelConfig::preset("tiny").to_hf_json().contains("rope_scaling"));
}

TEST(HfConfig, RopeScalingTypesAndTheirFields) {
  json j = json::parse(kLlama32_1B);
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 4}};  // "type": the field's older name
  EXPECT_EQ(ModelConfig::from_hf_json(j).rope_scaling, RopeScaling::linear(4.0));
  j["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_EQ(ModelConfig::from_hf_json(j).rope_scaling, RopeScaling());
  j["rope_scaling"] = nullptr;
  EXPECT_EQ(ModelConfig::from_hf_json(j).rope_scaling, RopeScaling());
  for (const char* type : {"dynamic", "yarn", "longrope", "ntk", "mrope"}) {
    j["rope_scaling"] = {{"rope_type", type}, {"factor", 4.0}};
    const std::string msg = parse_error(j);
    EXPECT_NE(msg.find(fmt::format("rope_scaling of type '{}' is not implemented", type)), std::string::npos) << msg;
  }
  struct Bad {
    json block;
    const char* says;
  };
  const json llama3 = json::parse(kLlama32_1B)["rope_scaling"];
  json no_factor = llama3, swapped = llama3, fractional = llama3, negative = llama3;
  no_factor.erase("factor");
  swapped["low_freq_factor"] = 4.0, swapped["high_freq_factor"] = 1.0;
  fractional["original_max_position_embeddings"] = 8192.5;
  negative["factor"] = -32.0;
  for (const Bad& b : {Bad{no_factor, "needs the field 'factor'"}, Bad{swapped, "must be greater than its low_freq"},
                       Bad{fractional, "original_max_position_embeddings must be a positive integer"},
                       Bad{negative, "factor must be a positive number"},
                       Bad{json{{"rope_type", "linear"}}, "needs the field 'factor'"}, Bad{json(8.0), "an object"}}) {
    j["rope_scaling"] = b.block;
    const std::string msg = parse_error(j);
    EXPECT_NE(msg.find(b.says), std::string::npos) << "expected '" << b.says << "', got: " << msg;
  }
}

TEST(HfConfig, RefusesWhatItCannotTrainNamingTheField) {
  struct Case {
    json config;
    const char* field;
  };
  json unknown = llama_without_rope_scaling();
  unknown["architectures"] = {"MistralForCausalLM"};
  json mlp_bias = llama_without_rope_scaling();
  mlp_bias["mlp_bias"] = true;
  json sliding = json::parse(kQwen25_05B);
  sliding["use_sliding_window"] = true;
  json layer_types = json::parse(kQwen3_06B);
  layer_types["layer_types"] = json::array();
  for (int i = 0; i < 28; i++) layer_types["layer_types"].push_back(i < 20 ? "full_attention" : "sliding_attention");
  json gelu = json::parse(kQwen3_06B);
  gelu["hidden_act"] = "gelu";
  json bad_gqa = llama_without_rope_scaling();
  bad_gqa["num_key_value_heads"] = 7;
  json missing = json::parse(kQwen25_05B);
  missing.erase("hidden_size");
  json dropout = json::parse(kQwen25_05B);
  dropout["attention_dropout"] = 0.1;
  json yarn = json::parse(kLlama32_1B);
  yarn["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  const Case cases[] = {
      {yarn, "rope_scaling of type 'yarn'"},
      {unknown, "MistralForCausalLM"},
      {mlp_bias, "mlp_bias"},
      {sliding, "use_sliding_window"},
      {layer_types, "layer_types"},
      {gelu, "hidden_act"},
      {bad_gqa, "num_key_value_heads"},
      {missing, "hidden_size"},
      {dropout, "attention_dropout"},
  };
  for (const Case& c : cases) {
    std::string msg = parse_error(c.config);
    EXPECT_NE(msg.find(c.field), std::string::npos) << "expected an error naming " << c.field << ", got: " << msg;
  }
}

// What a hostile or corrupt config.json held, and nlohmann's get<int>() made into a trainable model:
// vocab_size 4294967808 became 512, hidden_size 4294967360 became 64, hidden_size 64.5 became 64.
// A key tokamak does not read is named in a warning, once per file, with the read key it may be a misspelling of:
// `rms_norm_epz` silently gave the default epsilon. The Hub's own files and tokamak's round trip warn of nothing.
TEST(HfConfig, UnknownKeysAreNamedInAWarning) {
  auto warnings = [](const json& j, const std::string& source) {
    ::testing::internal::CaptureStderr();
    ModelConfig::from_hf_json(j, source);
    return ::testing::internal::GetCapturedStderr();
  };
  for (const char* text : {kLlama32_1B, kQwen25_05B, kQwen3_06B})
    EXPECT_EQ(warnings(json::parse(text), "hub.json"), "");
  EXPECT_EQ(warnings(ModelConfig::preset("qwen2.5-0.5b").to_hf_json(), "round-trip.json"), "");

  json j = json::parse(kQwen25_05B);
  j["rms_norm_epz"] = j["rms_norm_eps"];
  j.erase("rms_norm_eps");
  j["quantization_config"] = json::object();
  const std::string said = warnings(j, "renamed.json");
  EXPECT_NE(said.find("renamed.json: tokamak does not read the keys `quantization_config`, `rms_norm_epz` "
                      "(`rms_norm_epz` may be `rms_norm_eps` misspelt, which is absent and so takes its default)"),
            std::string::npos)
      << said;
  EXPECT_EQ(warnings(j, "renamed.json"), "");  // once per file
}

// Values transformers would not load, or that no model has: a model_type that is not the architecture's (or no
// architecture at all), rms_norm_eps of 1 or 2^31 (or 0, or negative).
TEST(HfConfig, ValuesOutsideWhatAModelCanHaveAreRefused) {
  json j = json::parse(kLlama32_1B);
  j["model_type"] = "lama";
  EXPECT_NE(parse_error(j).find("model_type 'lama' does not name the architecture LlamaForCausalLM (whose model_type "
                                "is 'llama')"),
            std::string::npos)
      << parse_error(j);
  j["model_type"] = "qwen2";
  EXPECT_NE(parse_error(j).find("model_type 'qwen2' does not name the architecture LlamaForCausalLM"),
            std::string::npos);
  j.erase("architectures");
  j["model_type"] = "xyzzy";
  EXPECT_NE(parse_error(j).find("model_type 'xyzzy' is not supported"), std::string::npos);
  for (const double eps : {1.0, 2147483648.0, 0.0, -1e-5, 0.011}) {
    json e = json::parse(kLlama32_1B);
    e["rms_norm_eps"] = eps;
    EXPECT_NE(parse_error(e).find(fmt::format("rms_norm_eps is {}; it must be above 0 and at most 0.01", eps)),
              std::string::npos)
        << eps << ": " << parse_error(e);
  }
  for (const double eps : {1e-12, 1e-6, 0.01}) {
    json e = json::parse(kLlama32_1B);
    e["rms_norm_eps"] = eps;
    EXPECT_EQ(parse_error(e), "") << eps;
  }
}

TEST(HfConfig, IntegerFieldsAreRangeCheckedNamingTheFileAndField) {
  struct Case {
    const char* field;
    json value;
    const char* says;
  };
  const Case cases[] = {
      {"vocab_size", json::parse("4294967808"), "vocab_size is 4294967808; it must be an integer from 1 to 16777216"},
      {"hidden_size", json::parse("4294967360"), "hidden_size is 4294967360; it must be an integer from 1 to 262144"},
      {"hidden_size", json::parse("64.5"), "hidden_size is 64.5, not an integer"},
      {"hidden_size", json::parse("1099511627776"), "hidden_size is 1099511627776"},
      {"num_hidden_layers", json::parse("1000000"), "num_hidden_layers is 1000000; it must be an integer from 1 to 4096"},
      {"num_attention_heads", json::parse("-32"), "num_attention_heads is -32"},
      {"num_key_value_heads", json::parse("0"), "num_key_value_heads is 0"},
      {"intermediate_size", json::parse("\"8192\""), "intermediate_size is \"8192\", not an integer"},
      {"head_dim", json::parse("0"), "head_dim is 0"},
      {"max_position_embeddings", json::parse("131072.0"), "max_position_embeddings is 131072.0, not an integer"},
      {"bos_token_id", json::parse("4294967296"), "bos_token_id is 4294967296"},
      {"eos_token_id", json::parse("[128001.5]"), "eos_token_id[0] is 128001.5, not an integer"},
  };
  for (const Case& c : cases) {
    json j = llama_without_rope_scaling();
    j[c.field] = c.value;
    std::string msg;
    try {
      ModelConfig::from_hf_json(j, "llama/config.json");
    } catch (const Error& e) {
      msg = e.what();
    }
    EXPECT_EQ(msg.find(std::string("llama/config.json: ") + c.says), 0u) << c.field << ": " << msg;
  }
}

// Shapes past the limits are refused by validate() too (a config built in code, or a preset changed by
// a flag), before a layout of a million layers or an overflowing parameter count is made.
TEST(ModelConfigLimits, AbsurdShapesAreRefusedBeforeAnyCount) {
  ModelConfig c = ModelConfig::preset("tiny");
  c.n_layers = 1000000;
  std::string msg;
  try {
    c.validate();
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("num_hidden_layers is 1000000; it must be from 1 to 4096"), std::string::npos) << msg;
  // At every limit at once the counts still fit in 64 bits, exactly.
  ModelConfig big = ModelConfig::preset("tiny");
  big.vocab_size = 1 << 24;
  big.d_model = 1 << 18;
  big.n_layers = 4096;
  big.n_heads = big.n_kv_heads = 64;
  big.head_dim = 4096;
  big.ffn_dim = 1 << 20;
  big.tied_embeddings = false;
  big.validate();
  const int64_t d = big.d_model, q = int64_t(big.n_heads) * big.head_dim, f = big.ffn_dim;
  const int64_t per_layer = 2 * d + 4 * d * q + 3 * d * f;
  EXPECT_EQ(big.total_params(), 2 * (int64_t(1) << 24) * d + 4096 * per_layer + d);
}

TEST(HfConfig, RoundTripThroughConfigJson) {
  std::vector<ModelConfig> configs;
  for (const std::string& name : ModelConfig::preset_names()) configs.push_back(ModelConfig::preset(name));
  json qwen3_bias = json::parse(kQwen3_06B);
  qwen3_bias["attention_bias"] = true;
  qwen3_bias["tie_word_embeddings"] = false;
  configs.push_back(ModelConfig::from_hf_json(qwen3_bias));
  json linear = json::parse(kQwen25_05B);
  linear["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.5}};
  configs.push_back(ModelConfig::from_hf_json(linear));
  for (const ModelConfig& c : configs) {
    json j = c.to_hf_json();
    EXPECT_EQ(j["architectures"][0], arch_hf_class(c.arch));
    EXPECT_EQ(j["model_type"], arch_name(c.arch));
    ModelConfig r = ModelConfig::from_hf_json(json::parse(j.dump()), "round trip");
    EXPECT_EQ(r.arch, c.arch) << c.name;
    EXPECT_EQ(r.vocab_size, c.vocab_size) << c.name;
    EXPECT_EQ(r.d_model, c.d_model) << c.name;
    EXPECT_EQ(r.n_layers, c.n_layers) << c.name;
    EXPECT_EQ(r.n_heads, c.n_heads) << c.name;
    EXPECT_EQ(r.n_kv_heads, c.n_kv_heads) << c.name;
    EXPECT_EQ(r.head_dim, c.head_dim) << c.name;
    EXPECT_EQ(r.ffn_dim, c.ffn_dim) << c.name;
    EXPECT_EQ(r.max_seq, c.max_seq) << c.name;
    EXPECT_EQ(r.rope_theta, c.rope_theta) << c.name;
    EXPECT_EQ(r.rope_scaling, c.rope_scaling) << c.name;
    EXPECT_EQ(r.norm_eps, c.norm_eps) << c.name;
    EXPECT_EQ(r.tied_embeddings, c.tied_embeddings) << c.name;
    EXPECT_EQ(r.qkv_bias, c.qkv_bias) << c.name;
    EXPECT_EQ(r.o_bias, c.o_bias) << c.name;
    EXPECT_EQ(r.qk_norm, c.qk_norm) << c.name;
    EXPECT_EQ(r.bos_id, c.bos_id) << c.name;
    EXPECT_EQ(r.eos_id, c.eos_id) << c.name;
    EXPECT_EQ(r.init_std, c.init_std) << c.name;
    EXPECT_EQ(r.total_params(), c.total_params()) << c.name;
  }
}

TEST(Resolve, PresetFileAndDirectory) {
  EXPECT_EQ(ModelConfig::resolve("qwen2.5-1.5b").d_model, 1536);
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / fmt::format("tk_config_test_{}", ::getpid());
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << kQwen3_06B;
  EXPECT_EQ(ModelConfig::resolve(dir.string()).arch, Arch::Qwen3);
  EXPECT_EQ(ModelConfig::resolve((dir / "config.json").string()).head_dim, 128);
  std::ofstream(dir / "broken.json") << "{\"architectures\": [";
  EXPECT_THROW(ModelConfig::resolve((dir / "broken.json").string()), Error);
  try {
    ModelConfig::resolve((dir / "absent").string());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tiny"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tk
