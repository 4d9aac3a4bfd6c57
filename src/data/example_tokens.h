// An example's tokens and its loss mask: which tokens are trained on as targets. Text is trained on throughout;
// a conversation is rendered with the model's chat template and, by default, only what the assistant says is
// trained on (its content and its end-of-turn token, as transformers' assistant mask and {% generation %} blocks
// define it, or found by rendering the conversation's prefixes where the template has no such blocks); prompt/
// completion and alpaca examples are a conversation of two turns with a template, else a documented plain text.
#pragma once
#include <cstdint>
#include <ctime>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/chat_template/chat_template.h"
#include "data/records.h"
#include "data/tokenizer.h"

namespace tk {

// --train-on: assistant (every assistant turn, or the completion), completion (the last assistant turn only), all
// (every token of the example).
enum class TrainOn { Assistant, Completion, All };
TrainOn parse_train_on(const std::string& name);
std::string train_on_name(TrainOn t);

struct ExampleTokens {
  std::vector<int32_t> tokens;
  // One per token, and one more for the end-of-text token that follows the example in a shard: 1 where trained on.
  std::vector<uint8_t> trained;
  uint64_t trained_count() const;
};

struct ExampleOptions {
  TrainOn train_on = TrainOn::Assistant;
  const ChatTemplate* chat_template = nullptr;  // null: chat records are refused, the others take the plain format
  nlohmann::ordered_json template_variables = nlohmann::ordered_json::object();  // e.g. enable_thinking
  std::time_t now = 0;  // strftime_now's time, the same for every example of a run
};

// The tokens of `text` and, for each, whether any of its bytes lies in one of `spans` (byte ranges of the text), as
// transformers' char_to_token marks its assistant mask; `trained` has one more value, 0, for an end-of-text.
ExampleTokens tokens_marking_spans(const Tokenizer& tok, std::string text, std::vector<std::pair<size_t, size_t>> spans,
                                   bool allow_special, const std::string& where);

// Thread-safe: one tokenizer for all of prepare's workers. Errors are tk::Errors "WHERE: ...".
ExampleTokens tokenize_example(const Example& e, const Tokenizer& tok, const ExampleOptions& o, const std::string& where);

}  // namespace tk
