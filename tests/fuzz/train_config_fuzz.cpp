// Fuzzes `tokamak train --config` files: any text as a TOML config file. A file that reads holds only
// scalars (a boolean, an integer, a float or a string each key), each key's line is in the file, and the
// entries written back as a config file (config.toml's writer) read back the same, floats to the bit.
#include <cmath>
#include <set>

#include "fuzz_support.h"
#include "train/config_file.h"

namespace {

// A key config.toml's writer can write bare: what a flag's name is made of.
bool is_bare_key(const std::string& k) {
  return !k.empty() && k.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") ==
                           std::string::npos;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tk;
  const std::string text(fuzz::as_text(data, size));
  const std::string path = fuzz::write_file("config.toml", text);
  fuzz::expect_clear_errors([&] {
    const ConfigFile file = read_config_file(path);
    const int64_t lines = int64_t(std::count(text.begin(), text.end(), '\n')) + 1;
    nlohmann::json written = nlohmann::json::object();
    std::set<std::string> flags;
    for (const ConfigEntry& e : file.entries) {
      fuzz::require(e.value.is_boolean() || e.value.is_number_integer() || e.value.is_number_float() ||
                    e.value.is_string());
      fuzz::require(e.line >= 1 && e.line <= lines);
      if (!is_bare_key(e.key) || (e.value.is_number_float() && !std::isfinite(e.value.get<double>()))) continue;
      const std::string key = config_key_of_flag(e.key);
      if (!flags.insert(flag_of_config_key(key)).second) continue;  // a-b and a_b name one flag
      written[key] = e.value;
    }
    const std::string back_path = fuzz::write_file("back.toml", config_file_text(written, "round trip"));
    const ConfigFile back = read_config_file(back_path);
    fuzz::require(back.entries.size() == written.size());
    for (const ConfigEntry& e : back.entries) {
      const nlohmann::json& v = written.at(config_key_of_flag(e.key));
      fuzz::require(v == e.value && v.is_number_float() == e.value.is_number_float());
    }
  });
  return 0;
}
