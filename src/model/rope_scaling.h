// RoPE scaling as a Hugging Face config.json states it (rope_scaling in transformers 4.x, rope_parameters in
// 5.x), and the rotary frequencies it gives: "linear" divides every frequency by a factor; "llama3" (Llama
// 3.1 and 3.2) divides the low frequencies, keeps the high ones and blends between, exactly as transformers'
// _compute_linear_scaling_rope_parameters and _compute_llama3_parameters do, computed in double.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tk {

struct RopeScaling {
  enum class Type { None, Linear, Llama3 };
  Type type = Type::None;
  double factor = 1.0;                        // linear and llama3
  double low_freq_factor = 1.0;               // llama3
  double high_freq_factor = 4.0;              // llama3
  int original_max_position_embeddings = 0;   // llama3: the context the model was pretrained with

  static RopeScaling linear(double factor);
  static RopeScaling llama3(double factor, double low_freq_factor, double high_freq_factor, int original_context);

  bool operator==(const RopeScaling&) const = default;
  std::string describe() const;  // "none", "linear (factor 4)", "llama3 (factor 32, low 1, high 4, original 8192)"

  // The block a config.json holds (rope_scaling, or rope_parameters without its rope_theta), or null for none.
  nlohmann::json to_hf_json() const;
  // From such a block: "default" (or no type) is none; "linear" and "llama3" need their fields; any other
  // type ("dynamic", "yarn", "longrope", ...) is a tk::Error naming it. Keys other than the type's own
  // (rope_theta in rope_parameters is the caller's) are ignored, as transformers ignores them.
  static RopeScaling from_hf_json(const nlohmann::json& block, const std::string& source);
};

// inv_freq[i] for i < head_dim / 2: theta^(-2i/head_dim), then scaled. Llama 3 keeps the frequencies whose
// wavelength 2 pi / f is shorter than original / high_freq_factor, divides by `factor` those longer than
// original / low_freq_factor, and in between takes (1 - s) f / factor + s f with
// s = (original / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor).
std::vector<double> rope_inv_freq(double theta, int head_dim, const RopeScaling& scaling);

}  // namespace tk
