// BPE training: merges worked out by hand, merges equal to Hugging Face tokenizers' on the test texts and
// the Brown Corpus (tests/fixtures/bpe_trainer), the written tokenizer.json loaded back and round-tripping
// any text, determinism, the encoder reproducing the training text's token count, the command line, and
// the errors a user can run into.
#include "data/bpe_trainer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include <zlib.h>

#include "core/fs.h"
#include "data/byte_level.h"
#include "data/hf_tokenizer_writer.h"
#include "data/text_input.h"
#include "data/tokenizer.h"
#include "data_testing.h"

namespace tk {
namespace {

using nlohmann::json;
using testing::error_of;
using testing::TempDir;
using testing::write_text;

const std::string kSource = TK_SOURCE_DIR;
const std::string kBrownDir = kSource + "/.cache/brown";
const std::string kTokamak = std::string(TK_BINARY_DIR) + "/tokamak";

// The merges as tokenizer.json spells them: "left right" in GPT-2's byte alphabet.
std::vector<std::string> spelled_merges(const TrainedBpe& bpe) {
  std::vector<std::string> out;
  for (auto [l, r] : bpe.merges) out.push_back(byte_level::spell(bpe.tokens[l]) + " " + byte_level::spell(bpe.tokens[r]));
  return out;
}

TrainedBpe train_on(const std::vector<std::string>& documents, BpeTrainerOptions opts = {}) {
  PieceCounts pieces;
  for (const std::string& d : documents) pieces.add_text(d);
  return train_bpe(pieces, opts);
}

// Each line with its line end a document: how Hugging Face's trainer reads a file.
void add_lines(PieceCounts& pieces, std::string_view text) {
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find('\n', begin);
    end = end == std::string_view::npos ? text.size() : end + 1;
    pieces.add_text(text.substr(begin, end - begin));
    begin = end;
  }
}

const json& hf_fixture(const std::string& name) {
  static const json j = json::parse(fs::read_file(kSource + "/tests/fixtures/bpe_trainer/hf-tokenizers.json"));
  for (const json& c : j["cases"])
    if (c["name"] == name) return c;
  throw std::runtime_error("no fixture case " + name);
}

std::vector<std::string> fixture_texts() {
  const json j = json::parse(fs::read_file(kSource + "/tests/fixtures/tokenizer/texts.json"));
  std::vector<std::string> texts;
  for (const json& t : j["texts"]) texts.push_back(t["text"]);
  return texts;
}

std::vector<std::string> brown_files() {
  std::vector<std::string> files;
  for (const InputFile& f : find_inputs({kBrownDir})) files.push_back(f.path);
  return files;
}

void require_brown() {
  ASSERT_TRUE(std::filesystem::exists(kBrownDir + "/ca01.txt")) << "the Brown Corpus is missing: run scripts/setup.sh";
}

TEST(BpeTrainer, ByteTokensAreNumberedAsInGpt2) {
  TrainedBpe bpe = train_on({"ab ab"});
  ASSERT_GE(bpe.tokens.size(), 256u);
  EXPECT_EQ(bpe.tokens[0], "!");    // GPT-2's encoder.json: "!" is 0, "Ġ" (a space) 220, "Ċ" (\n) 198
  EXPECT_EQ(bpe.tokens[220], " ");
  EXPECT_EQ(bpe.tokens[198], "\n");
  EXPECT_EQ(bpe.tokens[188], std::string(1, '\0'));
}

// "aaabdaaabac\n" twice: the pieces are "aaabdaaabac" (x2) and "\n" (x2). Counts in the big word
// (x2): aa 4, ab 2, bd/da/ba/ac 1 each. Byte ids follow the code points: a < b < c < d.
//   1. a a   (8)      -> aa a b d aa a b a c
//   2. a b   (4) ties with (aa, a) 4: (a, b) has the smaller left id     -> aa ab d aa ab a c
//   3. aa ab (4)      -> aaab d aaab a c
//   4. now (aaab, d), (d, aaab), (aaab, a), (a, c) all occur 2 times: (a, c) is smallest -> aaab d aaab ac
//   5. (d, aaab) beats (aaab, d): d is a byte token, aaab a later, larger id (comparing the strings
//      would take "aaab d" first)  -> aaab daaab ac
//   6. aaab daaab, then 7. aaabdaaab ac: the word is one token.
TEST(BpeTrainer, HandCheckedMergesAndTieRule) {
  TrainedBpe bpe = train_on({"aaabdaaabac\naaabdaaabac\n"});
  EXPECT_EQ(spelled_merges(bpe), (std::vector<std::string>{"a a", "a b", "aa ab", "a c", "d aaab", "aaab daaab",
                                                           "aaabdaaab ac"}));
  EXPECT_EQ(bpe.vocab_size(), 256 + 7 + 1);
  EXPECT_EQ(bpe.tokens.back(), "aaabdaaabac");
  EXPECT_EQ(bpe.text_tokens, 4u);  // the word and "\n", twice each
  EXPECT_EQ(bpe.text_bytes, 24u);
  EXPECT_EQ(bpe.stopped_because, "every piece of the text is a single token");
}

// "the cat the hat the": pieces "the", " cat", " the" (x2), " hat". Pairs: th 3, he 3, Ġt 2, at 2,
// then ones. (h, e) = (71, 68) beats (t, h) = (83, 71); then t+he (3); then (a, t) = (64, 83) beats
// (Ġ, the) = (220, 257), both 2; then Ġ+the (2). Every pair left occurs once: min_frequency 2 stops.
TEST(BpeTrainer, HandCheckedMergesWithSpacesAndMinFrequency) {
  TrainedBpe bpe = train_on({"the cat the hat the"});
  EXPECT_EQ(spelled_merges(bpe), (std::vector<std::string>{"h e", "t he", "a t", "Ġ the"}));
  EXPECT_EQ(bpe.text_tokens, 9u);  // the | Ġ c at | Ġthe | Ġ h at | Ġthe
  EXPECT_NE(bpe.stopped_because.find("occurs 1 time"), std::string::npos) << bpe.stopped_because;

  BpeTrainerOptions all;
  all.min_frequency = 0;
  EXPECT_GT(train_on({"the cat the hat the"}, all).merges.size(), 4u);
}

TEST(BpeTrainer, StopsAtTheVocabularySize) {
  BpeTrainerOptions opts;
  opts.vocab_size = 256 + 2 + 1;
  TrainedBpe bpe = train_on({"the cat the hat the"}, opts);
  EXPECT_EQ(spelled_merges(bpe), (std::vector<std::string>{"h e", "t he"}));
  EXPECT_EQ(bpe.vocab_size(), opts.vocab_size);
  EXPECT_EQ(bpe.stopped_because, "the vocabulary is full");
}

// Every merge down to pairs seen once on texts of many scripts, emoji, code and whitespace runs: here
// most merges are decided by the tie rule.
TEST(BpeTrainer, EqualsHuggingFaceOnTheTestTexts) {
  PieceCounts pieces;
  for (const std::string& t : fixture_texts()) add_lines(pieces, t);
  BpeTrainerOptions opts;
  opts.vocab_size = 30000;
  opts.min_frequency = 0;
  TrainedBpe bpe = train_bpe(pieces, opts);
  const auto expected = hf_fixture("texts")["merges"].get<std::vector<std::string>>();
  std::vector<std::string> got = spelled_merges(bpe);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); i++) ASSERT_EQ(got[i], expected[i]) << "merge " << i;
}

TEST(BpeTrainer, EqualsHuggingFaceOnTheBrownCorpus) {
  require_brown();
  PieceCounts pieces;
  for (const std::string& f : brown_files()) add_lines(pieces, fs::read_file(f));
  TrainedBpe bpe = train_bpe(pieces, BpeTrainerOptions{});  // 4096 tokens, min_frequency 2, <|endoftext|>
  const auto expected = hf_fixture("brown")["merges"].get<std::vector<std::string>>();
  std::vector<std::string> got = spelled_merges(bpe);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); i++) ASSERT_EQ(got[i], expected[i]) << "merge " << i;
}

// A few KB of varied text: written, loaded by tokamak's tokenizer.json reader, and round-tripped.
std::vector<std::string> varied_documents() {
  std::vector<std::string> docs = fixture_texts();
  docs.push_back("Café, naïve, façade, Ærøskøbing, Straße; ÀÉÎÕÜ àéîõü. 東京都の天気は晴れです。北京欢迎你！"
                 " 서울 😀🎉👍🏽 👨‍👩‍👧 Ελληνικά Русский текст עברית العربية हिन्दी");
  for (int i = 0; i < 20; i++) docs.push_back("The café on rue de l'Église serves crème brûlée " + std::to_string(i * 37) +
                                              " times a day; 東京 and 北京 love it. 😀\n");
  return docs;
}

TEST(BpeTrainer, WrittenTokenizerLoadsAndRoundTrips) {
  TempDir dir;
  BpeTrainerOptions opts;
  opts.vocab_size = 600;
  opts.special_tokens = {"<|endoftext|>", "<|pad|>"};
  const std::vector<std::string> docs = varied_documents();
  TrainedBpe bpe = train_on(docs, opts);
  ASSERT_EQ(bpe.vocab_size(), 600) << bpe.stopped_because;
  write_hf_tokenizer(bpe, dir.path("tok"), 1024);

  auto tok = Tokenizer::load(dir.path("tok"));
  EXPECT_EQ(tok->kind(), "hf-bpe");
  EXPECT_EQ(tok->vocab_size(), 600);
  EXPECT_EQ(tok->eot_text(), "<|endoftext|>");
  EXPECT_EQ(tok->eot_id(), 598);
  EXPECT_EQ(tok->encode("<|pad|>", true), (std::vector<int32_t>{599}));
  for (const std::string& d : docs) EXPECT_EQ(tok->decode(tok->encode(d)), d);
  std::mt19937 rng(7);
  for (int n = 0; n < 50; n++) {  // arbitrary bytes, invalid UTF-8 included
    std::string s(rng() % 64, '\0');
    for (char& c : s) c = char(rng());
    EXPECT_EQ(tok->decode(tok->encode(s)), s);
  }

  json j = json::parse(fs::read_file(dir.path("tok/tokenizer.json")));
  EXPECT_EQ(j["model"]["type"], "BPE");
  EXPECT_EQ(j["model"]["merges"].size(), bpe.merges.size());
  EXPECT_EQ(j["model"]["vocab"]["Ġ"], 220);
  EXPECT_EQ(j["pre_tokenizer"]["type"], "ByteLevel");
  EXPECT_EQ(j["pre_tokenizer"]["add_prefix_space"], false);
  EXPECT_EQ(j["post_processor"]["trim_offsets"], false);
  EXPECT_EQ(j["decoder"]["type"], "ByteLevel");
  EXPECT_TRUE(j["normalizer"].is_null());
  EXPECT_EQ(j["added_tokens"][1], (json{{"id", 599}, {"content", "<|pad|>"}, {"single_word", false}, {"lstrip", false},
                                        {"rstrip", false}, {"normalized", false}, {"special", true}}));
  json config = json::parse(fs::read_file(dir.path("tok/tokenizer_config.json")));
  EXPECT_EQ(config["tokenizer_class"], "PreTrainedTokenizerFast");
  EXPECT_EQ(config["eos_token"], "<|endoftext|>");
  EXPECT_EQ(config["bos_token"], "<|endoftext|>");
  EXPECT_EQ(config["model_max_length"], 1024);
}

// The file depends only on the text and the options: not on the run, the order pieces were counted
// in, or the number of counting threads.
TEST(BpeTrainer, TrainingIsDeterministic) {
  TempDir dir;
  const std::vector<std::string> docs = varied_documents();
  for (size_t i = 0; i < docs.size(); i++) write_text(dir.path(fmt::format("in/{:03}.txt", i)), docs[i].empty() ? " " : docs[i]);
  BpeTrainerOptions opts;
  opts.vocab_size = 700;
  opts.min_frequency = 1;  // many ties
  const std::vector<InputFile> inputs = find_inputs({dir.path("in")});
  const std::string one = hf_tokenizer_json(train_bpe(count_input_pieces(inputs, "text", 1, nullptr), opts));
  const std::string three = hf_tokenizer_json(train_bpe(count_input_pieces(inputs, "text", 3, nullptr), opts));
  EXPECT_EQ(one, three);
  PieceCounts backwards;
  for (size_t i = inputs.size(); i-- > 0;) backwards.add_text(fs::read_file(inputs[i].path));
  EXPECT_EQ(one, hf_tokenizer_json(train_bpe(backwards, opts)));
}

// What the trainer says the text becomes is what the tokenizer it wrote makes of the text.
void expect_encoder_reproduces_training(const std::vector<std::string>& docs, const BpeTrainerOptions& opts) {
  TempDir dir;
  TrainedBpe bpe = train_on(docs, opts);
  write_hf_tokenizer(bpe, dir.path(), 2048);
  auto tok = Tokenizer::load(dir.path("tokenizer.json"));
  uint64_t tokens = 0;
  for (const std::string& d : docs) tokens += tok->encode(d).size();
  EXPECT_EQ(tokens, bpe.text_tokens);
}

TEST(BpeTrainer, EncoderReproducesTheTrainingSegmentation) {
  BpeTrainerOptions opts;
  opts.vocab_size = 3000;
  opts.min_frequency = 1;
  expect_encoder_reproduces_training(varied_documents(), opts);
}

TEST(BpeTrainer, EncoderReproducesTheTrainingSegmentationOnBrown) {
  require_brown();
  std::vector<std::string> docs;
  for (const std::string& f : brown_files()) docs.push_back(fs::read_file(f));
  expect_encoder_reproduces_training(docs, BpeTrainerOptions{});
}

TEST(BpeTrainer, CountsJsonLinesAndCompressedInput) {
  TempDir dir;
  write_text(dir.path("a.jsonl"), "{\"text\": \"the cat\"}\n\n{\"text\": \" the hat the\"}\n");
  PieceCounts pieces = count_input_pieces(find_inputs({dir.path("a.jsonl")}), "text", 2, nullptr);
  EXPECT_EQ(pieces.text_bytes(), 19u);
  EXPECT_EQ(pieces.pieces(), 5u);
  EXPECT_EQ(pieces.counts().at(" the"), 2u);
  EXPECT_EQ(pieces.counts().at("the"), 1u);
  const std::string gz = dir.path("c.jsonl.gz");
  gzFile g = gzopen(gz.c_str(), "wb");
  const std::string line = "{\"text\": \"the end\"}\n";
  gzwrite(g, line.data(), unsigned(line.size()));
  gzclose(g);
  pieces = count_input_pieces(find_inputs({dir.path("a.jsonl"), gz}), "text", 2, nullptr);
  EXPECT_EQ(pieces.text_bytes(), 19u + 7);
  EXPECT_EQ(pieces.counts().at("the"), 2u);
  EXPECT_EQ(pieces.counts().at(" end"), 1u);
  write_text(dir.path("b.jsonl"), "{\"body\": \"x\"}\n");
  EXPECT_NE(error_of([&] { count_input_pieces(find_inputs({dir.path("b.jsonl")}), "text", 2, nullptr); })
                .find("b.jsonl:1"),
            std::string::npos);
}

TEST(BpeTrainer, Errors) {
  BpeTrainerOptions small;
  small.vocab_size = 257;
  EXPECT_NE(error_of([&] { train_on({"abc"}, small); }).find("--vocab-size 257 is too small: it must be at least 258"),
            std::string::npos);
  BpeTrainerOptions none;
  none.special_tokens = {};
  EXPECT_NE(error_of([&] { check_bpe_trainer_options(none); }).find("at least one special token"), std::string::npos);
  BpeTrainerOptions twice;
  twice.special_tokens = {"<s>", "<s>"};
  EXPECT_NE(error_of([&] { check_bpe_trainer_options(twice); }).find("named twice"), std::string::npos);
  BpeTrainerOptions bad_utf8;
  bad_utf8.special_tokens = {"<\xff>"};
  EXPECT_NE(error_of([&] { check_bpe_trainer_options(bad_utf8); }).find("not valid UTF-8"), std::string::npos);
  BpeTrainerOptions word;
  word.special_tokens = {"the"};
  EXPECT_NE(error_of([&] { train_on({"the the the"}, word); }).find("spelled like a token learned"),
            std::string::npos);

  EXPECT_NE(error_of([&] { train_bpe(PieceCounts(), BpeTrainerOptions{}); }).find("no text"), std::string::npos);
  TempDir dir;
  write_text(dir.path("empty.jsonl"), "{\"text\": \"\"}\n");
  PieceCounts empty = count_input_pieces(find_inputs({dir.path("empty.jsonl")}), "text", 1, nullptr);
  EXPECT_NE(error_of([&] { train_bpe(empty, BpeTrainerOptions{}); }).find("no text"), std::string::npos);

  write_text(dir.path("file"), "x");
  EXPECT_NE(error_of([&] { write_hf_tokenizer(train_on({"abc abc"}), dir.path("file"), 8); })
                .find("exists and is not a directory"),
            std::string::npos);
}

// The command line: the files it writes, its summary line, and a refusal before any work.
struct CliResult {
  int status;
  std::string out, err;
};

CliResult tokamak(const std::string& args, const TempDir& dir) {
  const std::string cmd = kTokamak + " " + args + " > " + dir.path("stdout") + " 2> " + dir.path("stderr");
  const int status = std::system(cmd.c_str());
  return {WEXITSTATUS(status), fs::read_file(dir.path("stdout")), fs::read_file(dir.path("stderr"))};
}

TEST(BpeTrainer, CommandLine) {
  if (!std::filesystem::exists(kTokamak)) GTEST_SKIP() << kTokamak << " is not built";
  TempDir dir;
  const std::vector<std::string> docs = varied_documents();
  for (size_t i = 0; i < docs.size(); i++) write_text(dir.path(fmt::format("in/{:03}.txt", i)), docs[i] + " ");
  CliResult r = tokamak("train-tokenizer --input " + dir.path("in") + " --vocab-size 500 --out " + dir.path("tok"), dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("vocab 500 = 256 bytes + 243 merges + 1 special"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bytes/token"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("merge ["), std::string::npos) << r.err;
  EXPECT_EQ(Tokenizer::load(dir.path("tok"))->vocab_size(), 500);

  write_text(dir.path("taken"), "x");
  r = tokamak("train-tokenizer --input " + dir.path("in") + " --vocab-size 500 --out " + dir.path("taken"), dir);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("exists and is not a directory"), std::string::npos) << r.err;
  r = tokamak("train-tokenizer --input " + dir.path("in") + " --vocab-size 100 --out " + dir.path("tok2"), dir);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("too small"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path("tok2")));
}

}  // namespace
}  // namespace tk
