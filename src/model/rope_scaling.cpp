// RoPE scaling: parsing and writing config.json's block, and the frequencies, following transformers'
// modeling_rope_utils formula for formula (in double where transformers computes in float32).
#include "model/rope_scaling.h"

#include <climits>
#include <cmath>
#include <numbers>

#include <fmt/format.h>

#include "core/error.h"

namespace tk {

namespace {

using nlohmann::json;

// A field of a rope_scaling block of type `type`.
double positive_number(const json& block, const char* key, const std::string& type, const std::string& src) {
  TK_CHECK(block.contains(key), "{}: rope_scaling of type '{}' needs the field '{}'", src, type, key);
  const json& v = block.at(key);
  TK_CHECK(v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > 0,
           "{}: rope_scaling.{} must be a positive number, got {}", src, key, v.dump());
  return v.get<double>();
}

int positive_int(const json& block, const char* key, const std::string& type, const std::string& src) {
  const double v = positive_number(block, key, type, src);
  TK_CHECK(block.at(key).is_number_integer() && v <= INT_MAX, "{}: rope_scaling.{} must be a positive integer, got {}",
           src, key, block.at(key).dump());
  return int(v);
}

}  // namespace

RopeScaling RopeScaling::linear(double factor) {
  RopeScaling s;
  s.type = Type::Linear;
  s.factor = factor;
  return s;
}

RopeScaling RopeScaling::llama3(double factor, double low_freq_factor, double high_freq_factor, int original_context) {
  RopeScaling s;
  s.type = Type::Llama3;
  s.factor = factor;
  s.low_freq_factor = low_freq_factor;
  s.high_freq_factor = high_freq_factor;
  s.original_max_position_embeddings = original_context;
  return s;
}

std::string RopeScaling::describe() const {
  switch (type) {
    case Type::None: return "none";
    case Type::Linear: return fmt::format("linear (factor {})", factor);
    case Type::Llama3:
      return fmt::format("llama3 (factor {}, low_freq_factor {}, high_freq_factor {}, original context {})", factor,
                         low_freq_factor, high_freq_factor, original_max_position_embeddings);
  }
  return "?";
}

json RopeScaling::to_hf_json() const {
  switch (type) {
    case Type::None: return nullptr;
    case Type::Linear: return {{"rope_type", "linear"}, {"factor", factor}};
    case Type::Llama3:
      return {{"rope_type", "llama3"},
              {"factor", factor},
              {"low_freq_factor", low_freq_factor},
              {"high_freq_factor", high_freq_factor},
              {"original_max_position_embeddings", original_max_position_embeddings}};
  }
  return nullptr;
}

RopeScaling RopeScaling::from_hf_json(const json& block, const std::string& src) {
  if (block.is_null()) return {};
  TK_CHECK(block.is_object(), "{}: rope_scaling should be an object, got {}", src, block.dump());
  // "type" is the field's older name, which transformers still reads.
  const json type_field = block.contains("rope_type") ? block.at("rope_type") : block.value("type", json("default"));
  TK_CHECK(type_field.is_string(), "{}: rope_scaling's rope_type should be a string, got {}", src, type_field.dump());
  const std::string type = type_field.get<std::string>();
  if (type == "default") return {};
  auto number = [&](const char* key) { return positive_number(block, key, type, src); };
  if (type == "linear") return linear(number("factor"));
  if (type == "llama3") {
    RopeScaling s = llama3(number("factor"), number("low_freq_factor"), number("high_freq_factor"),
                           positive_int(block, "original_max_position_embeddings", type, src));
    TK_CHECK(s.high_freq_factor > s.low_freq_factor,
             "{}: rope_scaling's high_freq_factor ({}) must be greater than its low_freq_factor ({})", src,
             s.high_freq_factor, s.low_freq_factor);
    return s;
  }
  fail("{}: rope_scaling of type '{}' is not implemented; tokamak implements plain RoPE and the 'linear' and "
       "'llama3' scalings",
       src, type);
}

std::vector<double> rope_inv_freq(double theta, int head_dim, const RopeScaling& s) {
  std::vector<double> inv_freq;
  for (int i = 0; i < head_dim / 2; i++) inv_freq.push_back(std::pow(theta, -2.0 * i / head_dim));
  if (s.type == RopeScaling::Type::Linear) {
    for (double& f : inv_freq) f /= s.factor;
  } else if (s.type == RopeScaling::Type::Llama3) {
    const double original = s.original_max_position_embeddings;
    const double low_freq_wavelen = original / s.low_freq_factor, high_freq_wavelen = original / s.high_freq_factor;
    for (double& f : inv_freq) {
      const double wavelen = 2 * std::numbers::pi / f;
      if (wavelen > low_freq_wavelen) {
        f /= s.factor;
      } else if (!(wavelen < high_freq_wavelen)) {  // the medium band, both ends included
        const double smooth = (original / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1 - smooth) * f / s.factor + smooth * f;
      }
    }
  }
  return inv_freq;
}

}  // namespace tk
