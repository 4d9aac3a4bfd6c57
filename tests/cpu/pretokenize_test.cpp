// Pre-tokenisation tests: the pieces the published regexes give (worked out by hand from the regex
// semantics of Python's `regex`, Rust's `regex` and Oniguruma), the \s translation, invalid UTF-8
// as a barrier, Sequence stages, gaps, empty matches, and megabyte-long runs.
#include <gtest/gtest.h>

#include "core/error.h"
#include "data/pretokenize.h"
#include "data/regex.h"
#include "data/tokenizer_spec.h"

namespace {

using Pieces = std::vector<std::string>;

const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

Pieces split(const std::vector<std::string>& patterns, std::string_view text) {
  tk::Pretokenizer p(patterns);
  std::vector<std::string_view> views;
  p.split(text, views);
  return Pieces(views.begin(), views.end());
}

TEST(Pretokenizer, Gpt2Pattern) {
  EXPECT_EQ(split({tk::kGpt2Pattern}, "Hello world's  end\n"),
            (Pieces{"Hello", " world", "'s", " ", " end", "\n"}));
  EXPECT_EQ(split({tk::kGpt2Pattern}, "IT'S 2024!!\n\n"), (Pieces{"IT", "'", "S", " 2024", "!!", "\n\n"}));
  EXPECT_EQ(split({tk::kGpt2Pattern}, "a\t\tb  "), (Pieces{"a", "\t", "\t", "b", "  "}));
}

TEST(Pretokenizer, Llama3Pattern) {
  EXPECT_EQ(split({kLlama3Pattern}, "IT'S 2024!!\n\n"), (Pieces{"IT", "'S", " ", "202", "4", "!!\n\n"}));
  EXPECT_EQ(split({kLlama3Pattern}, "x\n\n  y"), (Pieces{"x", "\n\n", " ", " y"}));
  EXPECT_EQ(split({kLlama3Pattern}, "$x (\"quoted\")"), (Pieces{"$x", " (\"", "quoted", "\")"}));
}

// \s is Unicode White_Space, as in Python, Rust and Oniguruma: U+180E (Mongolian vowel separator)
// is not whitespace there, though PCRE2's own \s counts it; U+0085 (NEL) is, though JavaScript's
// \s leaves it out.
TEST(Pretokenizer, WhitespaceIsUnicodeWhiteSpace) {
  EXPECT_EQ(split({tk::kGpt2Pattern}, "a \u180e b"), (Pieces{"a", " \u180e", " b"}));
  EXPECT_EQ(split({tk::kGpt2Pattern}, "a \u3000\u0085b"), (Pieces{"a", " \u3000", "\u0085", "b"}));
  EXPECT_EQ(tk::Pretokenizer::to_pcre2(R"(\s\S[^\s]\\s\Q\s\E)"),
            R"(\p{White_Space}\P{White_Space}[^\p{White_Space}]\\s\Q\s\E)");
}

// PCRE2 in MATCH_INVALID_UTF mode: no match crosses an invalid sequence, so invalid bytes fall
// into the gaps between matches and become pieces of their own.
TEST(Pretokenizer, InvalidUtf8IsABarrier) {
  EXPECT_EQ(split({tk::kGpt2Pattern}, "ab\xff" "cd"), (Pieces{"ab", "\xff", "cd"}));
  EXPECT_EQ(split({tk::kGpt2Pattern}, "a  \xff"), (Pieces{"a", "  ", "\xff"}));
  EXPECT_EQ(split({tk::kGpt2Pattern}, "\xe2\x82"), (Pieces{"\xe2\x82"}));
  EXPECT_EQ(split({tk::kGpt2Pattern}, "\xc3\xa9\xc3 \xed\xa0\x80x"), (Pieces{"\xc3\xa9", "\xc3", " ", "\xed\xa0\x80", "x"}));
}

TEST(Pretokenizer, SequenceSplitsEachPieceAgain) {
  EXPECT_EQ(split({R"(\s+|\S+)", R"(\p{N}{1,2}|\P{N}+)"}, "ab12345 x"), (Pieces{"ab", "12", "34", "5", " ", "x"}));
}

TEST(Pretokenizer, GapsAndEmptyMatchesArePiecesOfTheirOwn) {
  EXPECT_EQ(split({R"(\p{L}+)"}, "ab, cd!"), (Pieces{"ab", ", ", "cd", "!"}));
  EXPECT_EQ(split({"b*"}, "abc"), (Pieces{"a", "b", "c"}));
  EXPECT_EQ(split({"x*"}, "abc"), (Pieces{"abc"}));
  EXPECT_EQ(split({tk::kGpt2Pattern}, ""), Pieces{});
}

// A long run of one class is one piece (or a few), whatever its length: the JIT stack copes.
TEST(Pretokenizer, MegabyteRunsOfOneClass) {
  for (std::string run : {std::string(4 << 20, ' '), std::string(4 << 20, '7'), std::string(4 << 20, 'x')}) {
    tk::Pretokenizer p({tk::kGpt2Pattern});
    std::vector<std::string_view> pieces;
    std::string text = run + "!";
    p.split(text, pieces);
    std::string joined;
    for (auto piece : pieces) joined += piece;
    EXPECT_EQ(joined, text);
    EXPECT_LE(pieces.size(), 3u);
  }
}

TEST(Pretokenizer, BadRegexIsAClearError) {
  try {
    tk::Pretokenizer p({"(unclosed"});
    FAIL() << "compiled";
  } catch (const tk::Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not compile"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(unclosed"), std::string::npos) << e.what();
  }
}

// `$` is the end of the text, as in Rust (tiktoken), not also the place before a final newline.
TEST(Regex, DollarIsTheEndOfTheTextOnly) {
  EXPECT_FALSE(tk::Regex("a$").find("a\n", 0));
  EXPECT_TRUE(tk::Regex("a$").find("xa", 0));
}

}  // namespace
