// RoPE's frequencies under config.json's rope_scaling: against values computed apart from tokamak (Python's
// float64, written from transformers' _compute_llama3_parameters), against a second reading of the formula
// written here, and their properties: plain RoPE unchanged bit for bit, each band scaled as it should be.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "model/config.h"
#include "model/rope_scaling.h"
#include "ops/ops.h"

namespace tk {
namespace {

const RopeScaling kLlama32 = RopeScaling::llama3(32.0, 1.0, 4.0, 8192);
const RopeScaling kLlama31 = RopeScaling::llama3(8.0, 1.0, 4.0, 8192);

void expect_close(double got, double want, const char* what, int i) {
  EXPECT_NEAR(got, want, 1e-15 * std::abs(want)) << what << " i=" << i;
}

// Computed with Python 3 (float64) from transformers' formula, for head_dim 64 and 128 at rope_theta 500000.
TEST(RopeScaling, MatchesValuesComputedApart) {
  const std::vector<double> l32 = rope_inv_freq(500000.0, 64, kLlama32);
  ASSERT_EQ(l32.size(), 32u);
  const std::pair<int, double> llama32[] = {
      {0, 1.0},                      {14, 0.003211445994752591},    // high frequencies: kept
      {15, 0.001290547928209264},    {16, 0.00042955679655936815},  // the blended band
      {17, 9.70828780262767e-05},    {18, 1.9461638184831125e-05},  // low: divided by 32
      {31, 9.41830672543491e-08}};
  for (auto [i, want] : llama32) expect_close(l32[size_t(i)], want, "llama3.2", i);

  const std::vector<double> l31 = rope_inv_freq(500000.0, 128, kLlama31);
  ASSERT_EQ(l31.size(), 64u);
  const std::pair<int, double> llama31[] = {
      {28, 0.003211445994752591},  {29, 0.002166570763503359},   {32, 0.0005248461609929547},
      {35, 9.556212353964683e-05}, {36, 7.78465527393245e-05},   {63, 3.068925988914511e-07}};
  for (auto [i, want] : llama31) expect_close(l31[size_t(i)], want, "llama3.1", i);

  const std::vector<double> linear = rope_inv_freq(10000.0, 8, RopeScaling::linear(4.0));
  const double want_linear[] = {0.25, 0.025, 0.0025, 0.00025};
  for (int i = 0; i < 4; i++) expect_close(linear[size_t(i)], want_linear[i], "linear", i);
}

// The same formula read another way: by frequency rather than wavelength. With r = original * f / (2 pi), the
// number of turns over the original context: r < low_freq_factor divides by factor, r > high_freq_factor keeps f,
// and between them the factor falls linearly in r from 1/factor to 1.
double llama3_by_turns(double f, const RopeScaling& s) {
  const double r = s.original_max_position_embeddings * f / (2 * std::numbers::pi);
  if (r < s.low_freq_factor) return f / s.factor;
  if (r > s.high_freq_factor) return f;
  const double t = (r - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return f * (1 / s.factor + t * (1 - 1 / s.factor));
}

TEST(RopeScaling, AgreesWithTheFormulaReadByTurns) {
  for (double theta : {10000.0, 500000.0, 1e6})
    for (int hd : {16, 64, 96, 128})
      for (const RopeScaling& s : {kLlama32, kLlama31, RopeScaling::llama3(4.0, 2.0, 8.0, 4096)}) {
        const std::vector<double> got = rope_inv_freq(theta, hd, s);
        for (int i = 0; i < hd / 2; i++) {
          const double f = std::pow(theta, -2.0 * i / hd), want = llama3_by_turns(f, s);
          EXPECT_NEAR(got[size_t(i)], want, 1e-12 * want) << "theta " << theta << " hd " << hd << " i " << i;
        }
      }
}

TEST(RopeScaling, PlainRopeIsUnchangedBitForBit) {
  for (int hd : {6, 64, 128}) {
    EXPECT_EQ(rope_inv_freq(500000.0, hd, RopeScaling()), RopeSpec::plain(500000.0, hd).inv_freq);
    ModelConfig c = ModelConfig::preset("qwen2.5-0.5b");
    EXPECT_EQ(c.rope().inv_freq, RopeSpec::plain(c.rope_theta, c.head_dim).inv_freq);
  }
}

TEST(RopeScaling, EachBandIsScaledAsItShouldBe) {
  const std::vector<double> plain = RopeSpec::plain(500000.0, 64).inv_freq;
  const std::vector<double> scaled = ModelConfig::preset("llama3.2-1b").rope().inv_freq;
  ASSERT_EQ(scaled.size(), plain.size());
  int kept = 0, divided = 0, blended = 0;
  for (size_t i = 0; i < plain.size(); i++) {
    const double wavelength = 2 * std::numbers::pi / plain[i];
    if (wavelength < 8192.0 / 4) {
      EXPECT_EQ(scaled[i], plain[i]) << i;
      kept++;
    } else if (wavelength > 8192.0) {
      EXPECT_DOUBLE_EQ(scaled[i], plain[i] / 32) << i;
      divided++;
    } else {
      EXPECT_GT(scaled[i], plain[i] / 32) << i;
      EXPECT_LT(scaled[i], plain[i]) << i;
      blended++;
    }
    if (i > 0) EXPECT_LT(scaled[i], scaled[i - 1]) << "frequencies fall with i: " << i;
  }
  EXPECT_EQ(kept, 15);
  EXPECT_EQ(blended, 3);
  EXPECT_EQ(divided, 14);
  const std::vector<double> linear = rope_inv_freq(500000.0, 64, RopeScaling::linear(8.0));
  for (size_t i = 0; i < plain.size(); i++) EXPECT_DOUBLE_EQ(linear[i], plain[i] / 8) << i;
}

TEST(RopeScaling, DescribesItself) {
  EXPECT_EQ(RopeScaling().describe(), "none");
  EXPECT_EQ(RopeScaling::linear(2.5).describe(), "linear (factor 2.5)");
  EXPECT_EQ(kLlama32.describe(), "llama3 (factor 32, low_freq_factor 1, high_freq_factor 4, original context 8192)");
}

}  // namespace
}  // namespace tk
