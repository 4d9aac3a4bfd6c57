// Generated text given out as it grows (GeneratedText), on byte tokens: the pieces add up to the text; a stop
// string ends it, is not given out, and no piece ever shows its beginning before it is known not to be one; a
// character split over tokens is given out whole; and --stop's typed escapes.
#include "data/generated_text.h"

#include <gtest/gtest.h>

#include "data_testing.h"

namespace tk {
namespace {

// The pieces given out while adding `text` byte by byte, and whether a stop string ended it.
struct Given {
  std::vector<std::string> pieces;
  std::string all;
  bool stopped = false;
};

Given give(const std::string& text, const std::vector<std::string>& stops) {
  testing::ByteTokenizer tok;
  GeneratedText g(tok, stops);
  Given out;
  for (unsigned char c : text) {
    std::string piece = g.add(c);
    out.pieces.push_back(piece);
    out.all += piece;
    if (g.stopped()) break;
  }
  out.all += g.rest();
  out.stopped = g.stopped();
  return out;
}

TEST(GeneratedText, WithoutStopStringsEveryByteIsGivenOutAtOnce) {
  const Given g = give("The jury said.", {});
  EXPECT_EQ(g.all, "The jury said.");
  EXPECT_FALSE(g.stopped);
  for (const std::string& p : g.pieces) EXPECT_EQ(p.size(), 1u);
}

TEST(GeneratedText, AStopStringEndsTheTextAndIsNotGivenOut) {
  Given g = give("The jury said. And then", {". "});
  EXPECT_EQ(g.all, "The jury said");
  EXPECT_TRUE(g.stopped);
  // The '.' is held back until the next byte shows whether ". " follows.
  g = give("a.b. c", {". "});
  EXPECT_EQ(g.all, "a.b");
  EXPECT_EQ(g.pieces[1], "");    // "a." : the '.' may start ". "
  EXPECT_EQ(g.pieces[2], ".b");  // "a.b": it did not
}

TEST(GeneratedText, TheFirstOfSeveralStopStringsEndsIt) {
  EXPECT_EQ(give("one, two; three", {";", ","}).all, "one");
  EXPECT_EQ(give("one two\n\nthree", {"\n\n", "three"}).all, "one two");
  EXPECT_EQ(give("abc", {"", "zz"}).all, "abc");  // empty stop strings are ignored
}

TEST(GeneratedText, TextThatOnlyBeganLikeAStopStringIsGivenOutAtTheEnd) {
  const Given g = give("the end ##", {"###"});
  EXPECT_EQ(g.all, "the end ##");
  EXPECT_FALSE(g.stopped);
}

TEST(GeneratedText, ACharacterSplitOverTokensIsGivenOutWhole) {
  const Given g = give("caf\xc3\xa9!", {});
  EXPECT_EQ(g.all, "caf\xc3\xa9!");
  EXPECT_EQ(g.pieces[3], "");
  EXPECT_EQ(g.pieces[4], "\xc3\xa9");
}

TEST(GeneratedText, TypedEscapes) {
  EXPECT_EQ(unescape_typed("\\n\\n"), "\n\n");
  EXPECT_EQ(unescape_typed("a\\tb\\\\n"), "a\tb\\n");
  EXPECT_EQ(unescape_typed("c:\\x"), "c:\\x");
}

}  // namespace
}  // namespace tk
