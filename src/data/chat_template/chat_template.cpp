// Loading a model's chat template and rendering it with apply_chat_template's variables (chat_template.h).
#include "data/chat_template/chat_template.h"

#include <filesystem>

#include "core/error.h"
#include "core/fs.h"
#include "data/chat_template/lexer.h"
#include "data/chat_template/parser.h"
#include "data/chat_template/render.h"

namespace tk {
namespace stdfs = std::filesystem;

namespace {

using ojson = nlohmann::ordered_json;

ojson read_json_file(const std::string& path) {
  try {
    return ojson::parse(fs::read_file(path));
  } catch (const ojson::exception& e) {
    fail("{} is not valid JSON: {}", path, e.what());
  }
}

// tokenizer_config.json's chat_template: a string, or a list of {name, template} of which "default" is taken.
std::optional<std::string> template_of_config(const ojson& config, const std::string& path) {
  if (!config.is_object() || !config.contains("chat_template") || config["chat_template"].is_null()) return std::nullopt;
  const ojson& t = config["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array()) {
    std::string names;
    for (const ojson& e : t) {
      if (!e.is_object() || !e.contains("name") || !e.contains("template") || !e["template"].is_string())
        fail("{}: chat_template is a list whose items are not {{\"name\", \"template\"}} objects", path);
      if (e["name"] == "default") return e["template"].get<std::string>();
      names += (names.empty() ? "" : ", ") + e["name"].dump();
    }
    fail("{}: chat_template lists templates named {} but none named \"default\", the one tokamak uses", path, names);
  }
  fail("{}: chat_template is a {}, not a string or a list of named templates", path, t.type_name());
}

std::string directory_of_tokenizer(const std::string& path) {
  std::error_code ec;
  return stdfs::is_directory(path, ec) ? path : stdfs::path(path).parent_path().string();
}

ojson special_tokens_beside(const std::string& dir) {
  const std::string config = (stdfs::path(dir) / "tokenizer_config.json").string();
  std::error_code ec;
  return stdfs::exists(config, ec) ? special_tokens_of_config(read_json_file(config)) : ojson::object();
}

}  // namespace

ojson special_tokens_of_config(const ojson& config) {
  ojson out = ojson::object();
  if (!config.is_object()) return out;
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    if (!config.contains(key)) continue;
    const ojson& v = config[key];
    if (v.is_string()) out[key] = v;
    if (v.is_object() && v.contains("content") && v["content"].is_string()) out[key] = v["content"];
  }
  if (config.contains("additional_special_tokens") && config["additional_special_tokens"].is_array()) {
    ojson list = ojson::array();
    for (const ojson& v : config["additional_special_tokens"]) {
      if (v.is_string()) list.push_back(v);
      if (v.is_object() && v.contains("content")) list.push_back(v["content"]);
    }
    if (!list.empty()) out["additional_special_tokens"] = list;
  }
  return out;
}

ChatTemplate::ChatTemplate(std::string source, std::string name, ojson special_tokens)
    : source_(std::move(source)), name_(std::move(name)), special_tokens_(std::move(special_tokens)) {
  parsed_ = std::make_shared<const jinja::ParsedTemplate>(jinja::parse_template(jinja::lex_template(source_, name_), name_));
}

std::optional<ChatTemplate> ChatTemplate::find_for_tokenizer(const std::string& path) {
  const std::string dir = directory_of_tokenizer(path);
  const std::string jinja_file = (stdfs::path(dir) / "chat_template.jinja").string();
  const std::string config_file = (stdfs::path(dir) / "tokenizer_config.json").string();
  std::error_code ec;
  if (stdfs::exists(jinja_file, ec)) return load_file(jinja_file);
  if (!stdfs::exists(config_file, ec)) return std::nullopt;
  const ojson config = read_json_file(config_file);
  std::optional<std::string> source = template_of_config(config, config_file);
  if (!source) return std::nullopt;
  return ChatTemplate(std::move(*source), config_file, special_tokens_of_config(config));
}

ChatTemplate ChatTemplate::load_file(const std::string& path) {
  std::error_code ec;
  if (!stdfs::is_regular_file(path, ec)) fail("chat template {} does not exist", path);
  if (stdfs::path(path).extension() == ".json") {
    const ojson config = read_json_file(path);
    std::optional<std::string> source = template_of_config(config, path);
    if (!source) fail("{} has no chat_template", path);
    return ChatTemplate(std::move(*source), path, special_tokens_of_config(config));
  }
  return ChatTemplate(fs::read_file(path), path, special_tokens_beside(stdfs::path(path).parent_path().string()));
}

bool ChatTemplate::has_generation_markers() const { return parsed_->has_generation; }

RenderedChat ChatTemplate::render(const ChatInputs& in) const {
  using jinja::Value;
  TK_CHECK(in.messages.is_array(), "chat template {}: messages must be a list, not {}", name_, in.messages.type_name());
  TK_CHECK(in.variables.is_object(), "chat template {}: the extra variables must be an object", name_);
  jinja::Dict vars;
  try {
    for (const auto& [k, v] : special_tokens_.items()) vars.set(Value(k), jinja::from_json(v));
    for (const auto& [k, v] : in.variables.items()) vars.set(Value(k), jinja::from_json(v));
    vars.set(Value("messages"), jinja::from_json(in.messages));
    vars.set(Value("tools"), jinja::from_json(in.tools));
    vars.set(Value("documents"), Value::none());
    vars.set(Value("add_generation_prompt"), Value(in.add_generation_prompt));
  } catch (const jinja::Fault& f) {
    fail("chat template {}: {}", name_, f.what());
  }
  vars.set(Value("raise_exception"), Value::function("raise_exception", [](jinja::CallArgs& a) -> Value {
             jinja::fault("the template raised an exception: {}", a.positional.empty() ? "" : jinja::str(a.positional[0]));
           }));
  const std::time_t now = in.now ? *in.now : std::time(nullptr);
  vars.set(Value("strftime_now"), Value::function("strftime_now", [now](jinja::CallArgs& a) {
             if (a.positional.size() != 1 || !a.positional[0].is_string())
               jinja::fault("strftime_now() takes one format string");
             std::tm local{};
             localtime_r(&now, &local);
             char buf[512];
             const size_t n = std::strftime(buf, sizeof buf, a.positional[0].str().c_str(), &local);
             return Value(std::string(buf, n));
           }));
  jinja::RenderOutput out = jinja::render_template(*parsed_, name_, vars);
  return {std::move(out.text), std::move(out.generation)};
}

}  // namespace tk
