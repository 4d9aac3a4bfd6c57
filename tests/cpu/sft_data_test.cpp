// Fine-tuning data: record kinds and their fields, examples to tokens and loss masks (by {% generation %} blocks, by
// rendering prefixes, the plain formats, --train-on), packing into sequences (whole examples, filler, truncation),
// and prepare's shards read by the loader (untrained targets -1, rows on sequence boundaries, --seq checked).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/loader.h"
#include "data/packing.h"
#include "data/prepare.h"
#include "data/record_examples.h"
#include "data_testing.h"

namespace tk {
namespace {

using ojson = nlohmann::ordered_json;
using testing::ByteTokenizer;
using testing::error_of;
using testing::TempDir;
using testing::write_text;

// ChatML as most templates write it, without generation markers; and the same with them.
const char* kChatML =
    "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
const char* kChatMLMarked =
    "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' }}{% if m.role == 'assistant' %}{% generation %}"
    "{{ m.content + '<|im_end|>' }}{% endgeneration %}{% else %}{{ m.content + '<|im_end|>' }}{% endif %}{{ '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
// As Qwen3's: an earlier assistant turn loses its reasoning once a later user turn follows.
const char* kDropsEarlierThinking =
    "{% for m in messages %}{% set c = m.content %}{% if m.role == 'assistant' and not loop.last %}"
    "{% set c = c.split('</think>')[-1] %}{% endif %}{{ m.role + ': ' + c + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}";

const ojson kConversation = ojson::parse(R"([
  {"role": "system", "content": "S"},
  {"role": "user", "content": "Q1"},
  {"role": "assistant", "content": "A1"},
  {"role": "user", "content": "Q2"},
  {"role": "assistant", "content": "A2"}
])");

// The text of the tokens trained on (the byte tokenizer: one token a byte), each run of them in [].
std::string trained_text(const ExampleTokens& e) {
  std::string out;
  bool in = false;
  for (size_t i = 0; i < e.tokens.size(); i++) {
    if (e.trained[i] != in) out += in ? "]" : "[";
    in = e.trained[i];
    if (in) out += char(e.tokens[i]);
  }
  return out + (in ? "]" : "");
}

ExampleTokens tokens_of(const ojson& messages, const char* source, TrainOn on = TrainOn::Assistant) {
  ByteTokenizer tok;
  ChatTemplate t(source, "test.jinja");
  ExampleOptions o;
  o.train_on = on;
  o.chat_template = &t;
  Example e;
  e.format = RecordFormat::Chat;
  e.messages = messages;
  return tokenize_example(e, tok, o, "test:1");
}

TEST(Records, KindsAreToldByTheirFields) {
  const RecordFields f;
  EXPECT_EQ(detect_record_format(ojson::parse(R"({"messages": [], "text": "x"})"), f), RecordFormat::Chat);
  EXPECT_EQ(detect_record_format(ojson::parse(R"({"prompt": "a", "completion": "b"})"), f), RecordFormat::PromptCompletion);
  EXPECT_EQ(detect_record_format(ojson::parse(R"({"instruction": "a", "input": "", "output": "b"})"), f), RecordFormat::Alpaca);
  EXPECT_EQ(detect_record_format(ojson::parse(R"({"text": "x"})"), f), RecordFormat::Text);
  EXPECT_EQ(detect_record_format(ojson::parse(R"({"prompt": "only"})"), f), std::nullopt);
  RecordFields named;
  named.messages = "conversation";
  EXPECT_EQ(detect_record_format(ojson::parse(R"({"conversation": []})"), named), RecordFormat::Chat);
  EXPECT_EQ(parse_record_format("prompt-completion"), RecordFormat::PromptCompletion);
  EXPECT_NE(error_of([] { parse_record_format("sharegpt"); }).find("auto, text, chat, prompt-completion or alpaca"),
            std::string::npos);
}

TEST(Records, BadRecordsAreClearErrors) {
  const RecordFields f;
  auto error = [&](const char* json, RecordFormat k) { return error_of([&] { example_of(ojson::parse(json), k, f, "d.jsonl:7"); }); };
  EXPECT_EQ(error(R"({"messages": "hi"})", RecordFormat::Chat), "d.jsonl:7: field \"messages\" is a string, not a list of messages");
  EXPECT_EQ(error(R"({"messages": []})", RecordFormat::Chat), "d.jsonl:7: field \"messages\" holds no messages");
  EXPECT_EQ(error(R"({"messages": [{"content": "x"}]})", RecordFormat::Chat),
            "d.jsonl:7: messages[0] has no \"role\" string (it has: content)");
  EXPECT_EQ(error(R"({"messages": [{"role": "user"}]})", RecordFormat::Chat),
            "d.jsonl:7: messages[0] (role \"user\") has no \"content\"");
  EXPECT_EQ(error(R"({"prompt": "a"})", RecordFormat::PromptCompletion),
            "d.jsonl:7: no \"completion\" field (the record has: prompt); name it with --completion-field");
  EXPECT_EQ(error(R"({"instruction": 3, "output": "b"})", RecordFormat::Alpaca),
            "d.jsonl:7: field \"instruction\" is a number, not a string");
  RunFormat run{RecordFormat::PromptCompletion, "detected from d.jsonl:1", false};
  EXPECT_EQ(error_of([&] { record_example(ojson::parse(R"({"messages": [{"role": "user", "content": "x"}]})"), run, f, "d.jsonl:9"); }),
            "d.jsonl:9: a chat record, but the input's records are prompt-completion (detected from d.jsonl:1): every "
            "record of a run is of one kind; name it with --format");
}

TEST(ExampleTokens, AssistantTurnsFoundByRenderingPrefixes) {
  const ExampleTokens e = tokens_of(kConversation, kChatML);
  // Each assistant turn's content and end-of-turn token; not the newline after it, not the prompts.
  EXPECT_EQ(trained_text(e), "[A1<|im_end|>][A2<|im_end|>]");
  EXPECT_EQ(e.trained.back(), 0);  // the end-of-text after a rendered conversation is not trained on
  EXPECT_EQ(trained_text(tokens_of(kConversation, kChatML, TrainOn::Completion)), "[A2<|im_end|>]");
  const ExampleTokens all = tokens_of(kConversation, kChatML, TrainOn::All);
  EXPECT_EQ(all.trained[0], 0);  // the first token has nothing of its example before it
  EXPECT_EQ(all.trained_count(), all.tokens.size() - 1);
}

TEST(ExampleTokens, GenerationBlocksMarkTheAssistant) {
  EXPECT_EQ(trained_text(tokens_of(kConversation, kChatMLMarked)), "[A1<|im_end|>][A2<|im_end|>]");
  EXPECT_EQ(trained_text(tokens_of(kConversation, kChatMLMarked, TrainOn::Completion)), "[A2<|im_end|>]");
}

TEST(ExampleTokens, TemplatesThatRewriteEarlierTurnsNeedMarkersOrTheLastTurn) {
  const ojson thinking = ojson::parse(R"([
    {"role": "user", "content": "Q1"}, {"role": "assistant", "content": "r1</think>A1"},
    {"role": "user", "content": "Q2"}, {"role": "assistant", "content": "r2</think>A2"}])");
  const std::string msg = error_of([&] { tokens_of(thinking, kDropsEarlierThinking); });
  EXPECT_NE(msg.find("test:1: the chat template test.jinja renders assistant turn 1 differently once the turns after it "
                     "follow"),
            std::string::npos)
      << msg;
  EXPECT_EQ(trained_text(tokens_of(thinking, kDropsEarlierThinking, TrainOn::Completion)), "[r2</think>A2]");
}

TEST(ExampleTokens, PlainFormatsWithoutATemplate) {
  ByteTokenizer tok;
  ExampleOptions o;
  Example pc;
  pc.format = RecordFormat::PromptCompletion;
  pc.prompt = "2+2=";
  pc.completion = "4";
  const ExampleTokens a = tokenize_example(pc, tok, o, "x");
  EXPECT_EQ(std::string(a.tokens.begin(), a.tokens.end()), "2+2=4");
  EXPECT_EQ(trained_text(a), "[4]");
  EXPECT_EQ(a.trained.back(), 1);  // the end-of-text after the completion: the model learns to stop
  Example al;
  al.format = RecordFormat::Alpaca;
  al.instruction = "Add.";
  al.input = "2 and 2";
  al.completion = "4";
  const ExampleTokens b = tokenize_example(al, tok, o, "x");
  EXPECT_EQ(std::string(b.tokens.begin(), b.tokens.end()), "### Instruction:\nAdd.\n\n### Input:\n2 and 2\n\n### Response:\n4");
  al.input = "";
  const ExampleTokens c = tokenize_example(al, tok, o, "x");
  EXPECT_EQ(std::string(c.tokens.begin(), c.tokens.end()), "### Instruction:\nAdd.\n\n### Response:\n4");
  // With a template, the same example is a conversation of two turns.
  ChatTemplate t(kChatML, "chatml");
  o.chat_template = &t;
  const ExampleTokens d = tokenize_example(pc, tok, o, "x");
  EXPECT_EQ(std::string(d.tokens.begin(), d.tokens.end()), "<|im_start|>user\n2+2=<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n");
  EXPECT_EQ(trained_text(d), "[4<|im_end|>]");
}

TEST(ExampleTokens, ChatWithoutATemplateAndEndOfTextInsideAreRefused) {
  ByteTokenizer tok;
  Example e;
  e.format = RecordFormat::Chat;
  e.messages = kConversation;
  EXPECT_NE(error_of([&] { tokenize_example(e, tok, {}, "d.jsonl:3"); }).find("d.jsonl:3: chat records need a chat template"),
            std::string::npos);
  // A tokenizer whose end-of-text is a byte the template prints: it cannot be inside an example.
  struct EotIsNewline final : Tokenizer {
    ByteTokenizer bytes;
    std::vector<int32_t> encode(std::string_view text, bool) const override { return bytes.encode(text); }
    std::string decode(const std::vector<int32_t>& ids) const override { return bytes.decode(ids); }
    int32_t vocab_size() const override { return 257; }
    int32_t eot_id() const override { return '\n'; }
    std::string eot_text() const override { return "\\n"; }
    uint64_t fingerprint() const override { return 1; }
    std::string kind() const override { return "bytes"; }
  } newline_eot;
  ChatTemplate t(kChatML, "chatml");
  ExampleOptions o;
  o.chat_template = &t;
  EXPECT_NE(error_of([&] { tokenize_example(e, newline_eot, o, "d.jsonl:3"); }).find("d.jsonl:3: the text holds the end-of-text token"),
            std::string::npos);
}

ExampleTokens example(size_t tokens, int32_t id) {
  ExampleTokens e;
  e.tokens.assign(tokens, id);
  e.trained.assign(tokens + 1, 1);
  e.trained[0] = 0;
  return e;
}

TEST(Packing, SequencesHoldWholeExamplesAndFillerUpToTheirLength) {
  std::vector<std::vector<ExampleTokens>> out;
  SequencePacker p(10, 0, [&](const std::vector<ExampleTokens>& docs) { out.push_back(docs); });
  p.add(example(5, 1));  // 6 slots with its end-of-text
  p.add(example(6, 2));  // 7: does not fit beside the first, a second sequence
  p.add(example(3, 3));  // 4: fits the first exactly, which closes
  p.add(example(1, 4));  // 2: into the second
  p.add(example(20, 5));  // longer than a sequence: its first 9 tokens, the end-of-text untrained
  p.finish();
  ASSERT_EQ(out.size(), 4u);  // the first (full), the long one, the second with filler, the final end-of-text
  auto length = [](const std::vector<ExampleTokens>& docs) {
    size_t n = 0;
    for (const auto& d : docs) n += d.tokens.size() + 1;
    return n;
  };
  EXPECT_EQ(out[0].size(), 2u);
  EXPECT_EQ(out[0][1].tokens[0], 3);
  EXPECT_EQ(length(out[0]), 10u);
  EXPECT_EQ(out[1].size(), 1u);
  EXPECT_EQ(out[1][0].tokens.size(), 9u);
  EXPECT_EQ(out[1][0].trained.back(), 0);
  EXPECT_EQ(length(out[1]), 10u);
  ASSERT_EQ(out[2].size(), 3u);  // 7 + 2 = 9 slots, then a filler of 1: its end-of-text alone
  EXPECT_EQ(out[2][2].tokens.size(), 0u);
  EXPECT_EQ(out[2][2].trained_count(), 0u);
  EXPECT_EQ(length(out[2]), 10u);
  EXPECT_EQ(out[3].size(), 1u);
  EXPECT_EQ(out[3][0].tokens.size(), 0u);
  const PackingStats& s = p.stats();
  EXPECT_EQ(s.examples, 5u);
  EXPECT_EQ(s.truncated, 1u);
  EXPECT_EQ(s.sequences, 3u);
  EXPECT_EQ(s.slots, 30u);
  EXPECT_EQ(s.filler, 1u);
  EXPECT_EQ(s.trained, 5u + 6u + 3u + 1u + 8u);  // each example less its first token (and the long one's end-of-text)
  EXPECT_DOUBLE_EQ(s.efficiency(), 23.0 / 30.0);
}

// prepare on chat records, then the loader: every row one packed sequence, positions restarting per example, the
// prompts' targets -1.
TEST(PrepareChat, PackedMaskedShardsReadByTheLoader) {
  TempDir dir;
  write_text(dir.path("chatml.jinja"), kChatML);
  std::string lines;
  for (int i = 0; i < 40; i++)
    lines += ojson{{"messages", {{{"role", "user"}, {"content", "question " + std::to_string(i)}},
                                 {{"role", "assistant"}, {"content", std::string(size_t(i % 7 + 1), 'a')}}}}}.dump() + "\n";
  lines += ojson{{"messages", {{{"role", "user"}, {"content", "no answer"}}}}}.dump() + "\n";
  write_text(dir.path("chat.jsonl"), lines);
  PrepareOptions o;
  o.inputs = {dir.path("chat.jsonl")};
  o.out_dir = dir.path("out");
  o.val_fraction = 0;
  o.threads = 2;
  o.progress = false;
  o.chat_template = dir.path("chatml.jinja");
  o.seq = 128;
  ByteTokenizer tok;
  const PrepareSummary s = prepare(tok, o);
  EXPECT_EQ(s.format, RecordFormat::Chat);
  EXPECT_EQ(s.format_from, "detected from " + dir.path("chat.jsonl") + ":1");
  EXPECT_EQ(s.untrained_examples, 1u);
  EXPECT_EQ(s.train.packing.examples, 40u);
  EXPECT_EQ(s.train.tokens, s.train.packing.sequences * 128 + 1);
  EXPECT_NE(format_summary(s).find("packing efficiency"), std::string::npos);

  LoaderOptions lo;
  lo.data_dir = o.out_dir;
  lo.B = 2;
  lo.T = 128;
  lo.shuffle = false;
  lo.prefetch = 0;
  lo.doc_mask = true;
  auto loader = DataLoader::open(lo);
  uint64_t trained = 0;
  for (int64_t k = 0; k < loader->batches_per_epoch(); k++) {
    const Batch& b = loader->next();
    EXPECT_EQ(b.trained, count_trained(b));
    trained += uint64_t(b.trained);
    for (int r = 0; r < b.B; r++) {
      const int32_t* in = b.inputs + r * b.T;
      EXPECT_EQ(std::string(in, in + 12), "<|im_start|>") << "row " << r << " of batch " << k;  // a sequence's start
      EXPECT_EQ(b.positions[r * b.T], 0);
      for (int t = 0; t + 1 < b.T; t++) {
        // A trained target is an assistant's byte or its end-of-turn, never the prompt's.
        if (b.targets[r * b.T + t] == kUntrainedTarget) continue;
        EXPECT_NE(b.targets[r * b.T + t], ByteTokenizer::kEot);
      }
    }
  }
  EXPECT_GT(trained, 0u);
  lo.T = 64;
  EXPECT_NE(error_of([&] { DataLoader::open(lo); }).find("packed into sequences of 128 tokens (prepare --seq 128), but this run reads rows of 64"),
            std::string::npos);
}

TEST(PrepareChat, ChatRecordsWithoutATemplateAreRefusedBeforeReading) {
  TempDir dir;
  write_text(dir.path("chat.jsonl"), R"({"messages": [{"role": "user", "content": "hi"}]})" "\n");
  write_text(dir.path("tok/tokenizer_config.json"), "{}");
  PrepareOptions o;
  o.inputs = {dir.path("chat.jsonl")};
  o.out_dir = dir.path("out");
  o.tokenizer_path = dir.path("tok");
  o.progress = false;
  ByteTokenizer tok;
  EXPECT_NE(error_of([&] { prepare(tok, o); }).find("chat records (detected from " + dir.path("chat.jsonl") + ":1) need a chat template"),
            std::string::npos);
}

}  // namespace
}  // namespace tk
