// The progress line's numbers (percent, rates, ETA) and its behaviour outside a terminal: no line
// for every update, one final line at the end.
#include "core/progress.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace tk {
namespace {

TEST(Progress, LineShowsPercentRatesAndEta) {
  const std::string s = ProgressBar::line("prepare", 50'000'000, 100'000'000, 1'000'000, "tokens", 10.0);
  EXPECT_NE(s.find("prepare ["), std::string::npos) << s;
  EXPECT_NE(s.find(" 50.0%"), std::string::npos) << s;
  EXPECT_NE(s.find("50.0 MB / 100.0 MB"), std::string::npos) << s;
  EXPECT_NE(s.find("5.0 MB/s"), std::string::npos) << s;
  EXPECT_NE(s.find("100.0K tokens/s"), std::string::npos) << s;
  EXPECT_NE(s.find("ETA 10s"), std::string::npos) << s;
}

TEST(Progress, FinishedLineShowsTheTotalTime) {
  const std::string s = ProgressBar::line("prepare", 100, 100, 5, "tokens", 125.0);
  EXPECT_NE(s.find("100.0%"), std::string::npos) << s;
  EXPECT_NE(s.find("done in 2:05"), std::string::npos) << s;
  EXPECT_EQ(s.find("ETA"), std::string::npos) << s;
}

TEST(Progress, UnknownTotalShowsOnlyRates) {
  const std::string s = ProgressBar::line("read", 2'000'000, 0, 10, "items", 2.0);
  EXPECT_EQ(s.find('%'), std::string::npos) << s;
  EXPECT_EQ(s.find("ETA"), std::string::npos) << s;
  EXPECT_NE(s.find("1.0 MB/s"), std::string::npos) << s;
}

TEST(Progress, ItemsUnitCountsItemsNotBytes) {
  const std::string s = ProgressBar::line("merge", 1'500, 3'000, 0, "merges", 2.0, ProgressUnit::Items);
  EXPECT_NE(s.find(" 50.0%"), std::string::npos) << s;
  EXPECT_NE(s.find("1.5K / 3.0K merges"), std::string::npos) << s;
  EXPECT_NE(s.find("750 merges/s"), std::string::npos) << s;
  EXPECT_NE(s.find("ETA 2s"), std::string::npos) << s;
  EXPECT_EQ(s.find("B/s"), std::string::npos) << s;
}

TEST(Progress, OutsideATerminalPrintsOneFinalLine) {
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  {
    ProgressBar bar("prepare", 1000, "tokens", out);
    for (int i = 0; i < 100; i++) bar.add(10, 3);
    bar.finish();
    bar.finish();
  }
  std::rewind(out);
  std::string text;
  for (int c; (c = std::fgetc(out)) != EOF;) text += char(c);
  std::fclose(out);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos) << text;
  EXPECT_NE(text.find("100.0%"), std::string::npos) << text;
}

TEST(Progress, FailedWorkPrintsNoFinalLine) {
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  {
    ProgressBar bar("prepare", 1000, "tokens", out);
    bar.add(10, 3);
  }
  EXPECT_EQ(std::ftell(out), 0L) << "a bar destroyed without finish() claims a result";
  std::fclose(out);
}

// clear(): the caller prints its own result; outside a terminal a bar that drew nothing leaves nothing, and
// finish() after it adds no line.
TEST(Progress, ClearedBarLeavesNoLine) {
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  {
    ProgressBar bar("validation", 1000, "tokens", out, ProgressUnit::Items);
    bar.add(1000, 0);
    bar.clear();
    bar.finish();
  }
  EXPECT_EQ(std::ftell(out), 0L);
  std::fclose(out);
}

}  // namespace
}  // namespace tk
