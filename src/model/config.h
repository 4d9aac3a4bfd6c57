// ModelConfig: the shape of a Llama-family model (Llama, Qwen2 with q/k/v bias, Qwen3 with q/k norm),
// from a preset name or a Hugging Face config.json, and back to config.json for export.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/rope_scaling.h"

namespace tk {

struct RopeSpec;  // ops/ops.h

enum class Arch { Llama, Qwen2, Qwen3 };
const char* arch_name(Arch a);              // "llama", "qwen2", "qwen3"
const char* arch_hf_class(Arch a);          // "LlamaForCausalLM", ...

struct ModelConfig {
  std::string name;                 // preset name or the source path
  Arch arch = Arch::Llama;
  int vocab_size = 0;
  int d_model = 0;                  // hidden_size
  int n_layers = 0;                 // num_hidden_layers
  int n_heads = 0;                  // num_attention_heads
  int n_kv_heads = 0;               // num_key_value_heads
  int head_dim = 0;                 // hidden_size / heads unless given (Qwen3 sets it)
  int ffn_dim = 0;                  // intermediate_size
  int max_seq = 2048;               // max_position_embeddings
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;         // rope_scaling (Llama 3.1/3.2: "llama3"); none by default
  double norm_eps = 1e-5;           // rms_norm_eps
  bool tied_embeddings = true;      // tie_word_embeddings
  bool qkv_bias = false;            // Qwen2 (always); Llama and Qwen3 when attention_bias
  bool o_bias = false;              // o_proj bias: Llama and Qwen3 when attention_bias (never Qwen2)
  bool qk_norm = false;             // Qwen3
  int bos_id = -1, eos_id = -1;
  double init_std = 0.02;

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
  int qkv_dim() const { return q_dim() + 2 * kv_dim(); }
  // Parameters of the matmuls per docs/design.md (lm head counted once even when tied; embedding lookup not).
  int64_t matmul_params() const;
  int64_t total_params() const;     // every stored parameter (tied embeddings once)
  // Model FLOPs per token at sequence length T (docs/design.md): 6*N_matmul + 6*L*T*q.
  double flops_per_token(int T) const;

  // The rotary frequencies of rope_theta and rope_scaling, computed once for the ops (ops.h RopeSpec).
  RopeSpec rope() const;

  void validate() const;            // throws tk::Error naming the field that is wrong
  nlohmann::json to_hf_json() const;
  // Parses a Hugging Face config.json. Anything the engine cannot train exactly (an unknown
  // architecture, a rope_scaling other than linear and llama3, sliding windows, a hidden_act other than
  // silu, ...) is a tk::Error naming the field: never a silently different model.
  static ModelConfig from_hf_json(const nlohmann::json& j, const std::string& source = "config.json");
  static ModelConfig preset(const std::string& name);
  static std::vector<std::string> preset_names();
  // A preset name, a config.json path, or an HF model directory holding config.json.
  static ModelConfig resolve(const std::string& spec);
};

}  // namespace tk
