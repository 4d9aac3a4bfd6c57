// The kinds of record prepare reads, whatever file they come from (a JSON line's object, a Parquet row's fields):
// text, chat (a list of messages), prompt/completion, and alpaca (instruction, input, output). A record's kind is
// told by the fields it has, or named; each becomes one Example, which example_tokens.h turns into tokens and a loss
// mask. The field names can be set, as --text-field sets the text's.
#pragma once
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace tk {

enum class RecordFormat { Auto, Text, Chat, PromptCompletion, Alpaca };

// "auto", "text", "chat", "prompt-completion", "alpaca"; anything else is a tk::Error listing them.
RecordFormat parse_record_format(const std::string& name);
std::string record_format_name(RecordFormat f);

struct RecordFields {
  std::string text = "text";
  std::string messages = "messages", tools = "tools";  // chat: the list of {role, content, ...}; optional tools
  std::string prompt = "prompt", completion = "completion";
  std::string instruction = "instruction", input = "input", output = "output";  // alpaca; input may be absent
};

// The kind a record's fields tell: messages -> chat; prompt and completion -> prompt-completion; instruction and
// output -> alpaca; text -> text (checked in this order). Unset when it has none of them.
std::optional<RecordFormat> detect_record_format(const nlohmann::ordered_json& record, const RecordFields& fields);

// One record as a training example.
struct Example {
  RecordFormat format = RecordFormat::Text;
  std::string text;                 // text
  nlohmann::ordered_json messages;  // chat: the messages as given (every field kept for the template)
  nlohmann::ordered_json tools;     // chat: null when the record has none
  std::string prompt, completion;   // prompt-completion; alpaca's instruction and input as the prompt (below)
  std::string instruction, input;   // alpaca, as given
};

// The example of a record of the given kind (not Auto). A missing field, or one of the wrong type, is a tk::Error
// "WHERE: ..." naming the field and what the record holds.
Example example_of(const nlohmann::ordered_json& record, RecordFormat format, const RecordFields& fields,
                   const std::string& where);

// An example of prompt and answer as the two messages of a conversation, for a chat template: the prompt as the
// user's turn (alpaca: the instruction, then a blank line and the input when there is one), the completion as the
// assistant's.
nlohmann::ordered_json as_messages(const Example& e);

// The documented plain formats for prompt/completion and alpaca examples without a chat template (docs/data.md):
// the text before the trained part, and the trained part.
std::pair<std::string, std::string> plain_prompt_and_answer(const Example& e);

}  // namespace tk
