// Examples to tokens and loss masks (example_tokens.h). The trained part of a text is a set of byte spans; a token is
// trained on when any of its bytes lies in one, as transformers' char_to_token marks the assistant mask. The first
// token of an example is never trained on: nothing of its own example precedes it.
#include "data/example_tokens.h"

#include <algorithm>

#include "core/error.h"
#include "data/normalize.h"

namespace tk {
namespace {

using ojson = nlohmann::ordered_json;
using Span = std::pair<size_t, size_t>;

// Each token's [begin, end) in `text`, from the bytes each decodes to; where the tokenizer normalised the text (NFC),
// in the normalised text, `text` then replaced by it and the spans moved with it.
std::vector<Span> token_offsets(const Tokenizer& tok, const std::vector<int32_t>& ids, std::string& text,
                                std::vector<Span>& spans, const std::string& where) {
  std::vector<Span> at;
  at.reserve(ids.size());
  std::string spelled;
  for (int32_t id : ids) {
    const size_t begin = spelled.size();
    spelled += tok.decode({id});
    at.emplace_back(begin, spelled.size());
  }
  if (spelled == text) return at;
  const std::string normal = to_nfc(text);
  if (spelled != normal) fail("{}: internal error: the tokens do not spell the text they were made of", where);
  for (Span& s : spans) {
    for (size_t* edge : {&s.first, &s.second}) {
      const std::string prefix = to_nfc(std::string_view(text).substr(0, *edge));
      if (normal.compare(0, prefix.size(), prefix) != 0)
        fail("{}: the tokenizer's normalisation changes the text across the edge of a trained part", where);
      *edge = prefix.size();
    }
  }
  text = normal;
  return at;
}

ExampleTokens mark(const Tokenizer& tok, std::string text, std::vector<Span> spans, bool allow_special,
                   bool eot_trained, const std::string& where) {
  ExampleTokens out = tokens_marking_spans(tok, std::move(text), std::move(spans), allow_special, where);
  if (!out.tokens.empty()) out.trained[0] = 0;
  out.trained.back() = eot_trained ? 1 : 0;
  const auto eot = std::find(out.tokens.begin(), out.tokens.end(), tok.eot_id());
  if (eot != out.tokens.end())
    fail("{}: the text holds the end-of-text token {} (at token {}), which separates examples in the shards; it "
         "cannot be part of one",
         where, tok.eot_text(), eot - out.tokens.begin());
  return out;
}

// Python's str.rstrip(): where a span's text ends once trailing whitespace is left out.
size_t rstrip_end(const std::string& text, size_t begin, size_t end) {
  while (end > begin && (text[end - 1] == ' ' || text[end - 1] == '\n' || text[end - 1] == '\t' || text[end - 1] == '\r'))
    end--;
  return end;
}

ChatInputs inputs_for(const ojson& messages, const Example& e, bool generation_prompt, const ExampleOptions& o) {
  ChatInputs in;
  in.messages = messages;
  in.tools = e.tools;
  in.add_generation_prompt = generation_prompt;
  in.variables = o.template_variables;
  in.now = o.now;
  return in;
}

// The assistant turns' spans in the rendering of the whole conversation, found by rendering prefixes: turn i spans
// from the end of messages[0, i) rendered with the generation prompt to the end of messages[0, i] rendered without
// it, less the whitespace after its end-of-turn token. Both must begin the whole rendering.
std::vector<Span> assistant_spans_by_prefixes(const ChatTemplate& t, const ojson& messages, const std::string& whole,
                                              const Example& e, const ExampleOptions& o, const std::string& where) {
  std::vector<size_t> turns;
  for (size_t i = 0; i < messages.size(); i++)
    if (messages[i]["role"] == "assistant") turns.push_back(i);
  if (o.train_on == TrainOn::Completion && !turns.empty()) turns = {turns.back()};
  std::vector<Span> spans;
  for (size_t i : turns) {
    const ojson before(messages.begin(), messages.begin() + ptrdiff_t(i));
    const ojson through(messages.begin(), messages.begin() + ptrdiff_t(i) + 1);
    const std::string prompt = t.render(inputs_for(before, e, true, o)).text;
    const std::string turn = t.render(inputs_for(through, e, false, o)).text;
    if (turn.compare(0, prompt.size(), prompt) != 0 || whole.compare(0, turn.size(), turn) != 0)
      fail("{}: the chat template {} renders assistant turn {} differently once the turns after it follow (as Qwen3's "
           "drops the thinking of earlier turns), so its tokens cannot be found by rendering the conversation's "
           "prefixes: train on the last turn only (--train-on completion), or give a template that marks the "
           "assistant's text with {{% generation %}} blocks (--chat-template)",
           where, t.name(), i);
    spans.emplace_back(prompt.size(), rstrip_end(turn, prompt.size(), turn.size()));
  }
  return spans;
}

ExampleTokens tokenize_conversation(const Example& e, const ojson& messages, const Tokenizer& tok,
                                    const ExampleOptions& o, const std::string& where) {
  const ChatTemplate& t = *o.chat_template;
  RenderedChat whole;
  try {
    whole = t.render(inputs_for(messages, e, false, o));
  } catch (const Error& err) {
    fail("{}: {}", where, err.what());
  }
  std::vector<Span> spans;
  if (o.train_on == TrainOn::All) {
    spans.emplace_back(0, whole.text.size());
  } else if (t.has_generation_markers()) {
    spans = whole.generation;
    if (o.train_on == TrainOn::Completion && !spans.empty()) spans = {spans.back()};
  } else {
    spans = assistant_spans_by_prefixes(t, messages, whole.text, e, o, where);
  }
  return mark(tok, std::move(whole.text), std::move(spans), /*allow_special=*/true, /*eot_trained=*/false, where);
}

}  // namespace

ExampleTokens tokens_marking_spans(const Tokenizer& tok, std::string text, std::vector<std::pair<size_t, size_t>> spans,
                                   bool allow_special, const std::string& where) {
  ExampleTokens out;
  out.tokens = tok.encode(text, allow_special);
  const std::vector<Span> at = token_offsets(tok, out.tokens, text, spans, where);
  out.trained.assign(out.tokens.size() + 1, 0);
  for (size_t i = 0; i < out.tokens.size(); i++)
    for (const Span& s : spans)
      if (at[i].first < s.second && s.first < at[i].second) {
        out.trained[i] = 1;
        break;
      }
  return out;
}

TrainOn parse_train_on(const std::string& name) {
  if (name == "assistant") return TrainOn::Assistant;
  if (name == "completion") return TrainOn::Completion;
  if (name == "all") return TrainOn::All;
  fail("--train-on must be assistant, completion or all, not \"{}\"", name);
}

std::string train_on_name(TrainOn t) {
  return t == TrainOn::Assistant ? "assistant" : t == TrainOn::Completion ? "completion" : "all";
}

uint64_t ExampleTokens::trained_count() const { return uint64_t(std::count(trained.begin(), trained.end(), 1)); }

ExampleTokens tokenize_example(const Example& e, const Tokenizer& tok, const ExampleOptions& o, const std::string& where) {
  switch (e.format) {
    case RecordFormat::Text: {
      ExampleTokens out;
      out.tokens = tok.encode(e.text);
      out.trained.assign(out.tokens.size() + 1, 1);
      return out;
    }
    case RecordFormat::Chat:
      if (!o.chat_template)
        fail("{}: chat records need a chat template, and the tokenizer has none (no chat_template in its "
             "tokenizer_config.json, no chat_template.jinja beside it): give one with --chat-template FILE",
             where);
      return tokenize_conversation(e, e.messages, tok, o, where);
    case RecordFormat::PromptCompletion:
    case RecordFormat::Alpaca: {
      if (o.chat_template) return tokenize_conversation(e, as_messages(e), tok, o, where);
      const auto [prompt, answer] = plain_prompt_and_answer(e);
      const std::string text = prompt + answer;
      const Span trained = o.train_on == TrainOn::All ? Span(0, text.size()) : Span(prompt.size(), text.size());
      return mark(tok, text, {trained}, /*allow_special=*/false, /*eot_trained=*/true, where);
    }
    case RecordFormat::Auto: break;
  }
  fail("internal error: an example of no kind at {}", where);
}

}  // namespace tk
