// A model's chat template: the Jinja template of its tokenizer_config.json (or chat_template.jinja beside it),
// rendered as transformers' apply_chat_template renders it: the same variables (messages, tools,
// add_generation_prompt, the special tokens, raise_exception, strftime_now, and any extra ones such as
// enable_thinking), the same environment settings, and the {% generation %} spans that mark what the assistant says.
#pragma once
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tk {

namespace jinja {
struct ParsedTemplate;
}

struct ChatInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // [{role, content, ...}, ...]
  nlohmann::ordered_json tools;                   // null: none (the template sees tools = none)
  bool add_generation_prompt = false;
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();  // more, e.g. {"enable_thinking": false}
  std::optional<std::time_t> now;                 // strftime_now's time (local); unset: the current time
};

struct RenderedChat {
  std::string text;
  std::vector<std::pair<size_t, size_t>> generation;  // [begin, end) byte spans of {% generation %} blocks
};

class ChatTemplate {
 public:
  // `special_tokens`: the tokenizer's bos_token, eos_token, ... as tokenizer_config.json names them (strings).
  ChatTemplate(std::string source, std::string name, nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object());

  // The template of a tokenizer: PATH is its directory, or a file in it (tokenizer.json); chat_template.jinja there
  // is taken first, then tokenizer_config.json's chat_template (a string, or a list of named templates: "default").
  // Unset when the tokenizer has none.
  static std::optional<ChatTemplate> find_for_tokenizer(const std::string& path);
  // A template from a file: a .jinja file, or a tokenizer_config.json. The special tokens come from the
  // tokenizer_config.json (for a .jinja file: one beside it, if any).
  static ChatTemplate load_file(const std::string& path);

  // Any error (in the template, or raised by it) is a tk::Error naming the template and its line.
  RenderedChat render(const ChatInputs& inputs) const;

  bool has_generation_markers() const;
  const std::string& source() const { return source_; }
  const std::string& name() const { return name_; }
  const nlohmann::ordered_json& special_tokens() const { return special_tokens_; }

 private:
  std::string source_, name_;
  nlohmann::ordered_json special_tokens_;
  std::shared_ptr<const jinja::ParsedTemplate> parsed_;
};

// tokenizer_config.json's special tokens as apply_chat_template passes them to a template: each of bos_token,
// eos_token, unk_token, sep_token, pad_token, cls_token, mask_token that is set (a string, or an added-token object's
// "content"), and additional_special_tokens when not empty.
nlohmann::ordered_json special_tokens_of_config(const nlohmann::ordered_json& config);

}  // namespace tk
