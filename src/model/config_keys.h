// The keys of a Hugging Face config.json that tokamak knows: those ModelConfig::from_hf_json reads, and those it
// may pass over because they do not change the model (the transformers version, the dtype weights are stored in,
// generation defaults, ...). Any other key is named in a warning, with the read key it is closest to, so that a
// misspelt field (`rms_norm_epz`) is not silently replaced by its default.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace tk {

// Warns (once per source and process) about the keys of `j` that tokamak neither reads nor knows to be harmless.
void warn_unknown_config_keys(const nlohmann::json& j, const std::string& source);

}  // namespace tk
