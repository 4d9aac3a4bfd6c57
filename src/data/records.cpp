// Record kinds and their examples (records.h).
#include "data/records.h"

#include "core/error.h"

namespace tk {
namespace {

using ojson = nlohmann::ordered_json;

std::string field_list(const ojson& record) {
  std::string keys;
  for (const auto& [k, v] : record.items()) keys += (keys.empty() ? "" : ", ") + k;
  return keys.empty() ? "no fields" : keys;
}

const std::string& string_field(const ojson& record, const std::string& name, const std::string& where,
                                const char* flag) {
  const auto it = record.find(name);
  if (it == record.end())
    fail("{}: no \"{}\" field (the record has: {}); name it with {}", where, name, field_list(record), flag);
  if (!it->is_string()) fail("{}: field \"{}\" is a {}, not a string", where, name, it->type_name());
  return it->get_ref<const std::string&>();
}

void check_messages(const ojson& messages, const std::string& field, const std::string& where) {
  if (!messages.is_array()) fail("{}: field \"{}\" is a {}, not a list of messages", where, field, messages.type_name());
  if (messages.empty()) fail("{}: field \"{}\" holds no messages", where, field);
  for (size_t i = 0; i < messages.size(); i++) {
    const ojson& m = messages[i];
    if (!m.is_object()) fail("{}: {}[{}] is a {}, not a {{\"role\", \"content\"}} object", where, field, i, m.type_name());
    if (!m.contains("role") || !m["role"].is_string())
      fail("{}: {}[{}] has no \"role\" string (it has: {})", where, field, i, field_list(m));
    const bool calls = m.contains("tool_calls") && !m["tool_calls"].is_null();
    if (!calls && (!m.contains("content") || m["content"].is_null()))
      fail("{}: {}[{}] (role \"{}\") has no \"content\"", where, field, i, m["role"].get<std::string>());
  }
}

}  // namespace

RecordFormat parse_record_format(const std::string& name) {
  if (name == "auto") return RecordFormat::Auto;
  if (name == "text") return RecordFormat::Text;
  if (name == "chat") return RecordFormat::Chat;
  if (name == "prompt-completion") return RecordFormat::PromptCompletion;
  if (name == "alpaca") return RecordFormat::Alpaca;
  fail("--format must be auto, text, chat, prompt-completion or alpaca, not \"{}\"", name);
}

std::string record_format_name(RecordFormat f) {
  switch (f) {
    case RecordFormat::Auto: return "auto";
    case RecordFormat::Text: return "text";
    case RecordFormat::Chat: return "chat";
    case RecordFormat::PromptCompletion: return "prompt-completion";
    case RecordFormat::Alpaca: return "alpaca";
  }
  return "?";
}

std::optional<RecordFormat> detect_record_format(const ojson& record, const RecordFields& f) {
  if (!record.is_object()) return std::nullopt;
  if (record.contains(f.messages)) return RecordFormat::Chat;
  if (record.contains(f.prompt) && record.contains(f.completion)) return RecordFormat::PromptCompletion;
  if (record.contains(f.instruction) && record.contains(f.output)) return RecordFormat::Alpaca;
  if (record.contains(f.text)) return RecordFormat::Text;
  return std::nullopt;
}

Example example_of(const ojson& record, RecordFormat format, const RecordFields& f, const std::string& where) {
  if (!record.is_object()) fail("{}: expected a JSON object, found {}", where, record.type_name());
  Example e;
  e.format = format;
  switch (format) {
    case RecordFormat::Auto: fail("internal error: example_of needs a record kind");
    case RecordFormat::Text: e.text = string_field(record, f.text, where, "--text-field"); break;
    case RecordFormat::Chat: {
      const auto it = record.find(f.messages);
      if (it == record.end())
        fail("{}: no \"{}\" field (the record has: {}); name it with --messages-field", where, f.messages,
             field_list(record));
      check_messages(*it, f.messages, where);
      e.messages = *it;
      if (record.contains(f.tools) && !record[f.tools].is_null()) {
        if (!record[f.tools].is_array()) fail("{}: field \"{}\" is a {}, not a list of tools", where, f.tools, record[f.tools].type_name());
        e.tools = record[f.tools];
      }
      break;
    }
    case RecordFormat::PromptCompletion:
      e.prompt = string_field(record, f.prompt, where, "--prompt-field");
      e.completion = string_field(record, f.completion, where, "--completion-field");
      break;
    case RecordFormat::Alpaca:
      e.instruction = string_field(record, f.instruction, where, "--instruction-field");
      if (record.contains(f.input) && !record[f.input].is_null()) e.input = string_field(record, f.input, where, "--input-field");
      e.completion = string_field(record, f.output, where, "--output-field");
      e.prompt = e.input.empty() ? e.instruction : e.instruction + "\n\n" + e.input;
      break;
  }
  return e;
}

ojson as_messages(const Example& e) {
  return ojson::array({{{"role", "user"}, {"content", e.prompt}}, {{"role", "assistant"}, {"content", e.completion}}});
}

std::pair<std::string, std::string> plain_prompt_and_answer(const Example& e) {
  if (e.format == RecordFormat::Alpaca) {
    std::string prompt = "### Instruction:\n" + e.instruction + "\n\n";
    if (!e.input.empty()) prompt += "### Input:\n" + e.input + "\n\n";
    return {prompt + "### Response:\n", e.completion};
  }
  return {e.prompt, e.completion};
}

}  // namespace tk
