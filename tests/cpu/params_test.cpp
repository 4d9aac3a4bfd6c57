// ParamLayout: Hugging Face names and shapes, the adjacency that makes the fused QKV and gate-up
// matrices plain views, group alignment, no overlaps, tied heads, and AdamW segments; the layout and
// the buffer plan refuse sizes that overflow.
#include <algorithm>
#include <string>

#include <gtest/gtest.h>

#include "core/error.h"
#include "model/buffer_carver.h"
#include "model/config.h"
#include "model/params.h"

namespace tk {
namespace {

// Small shapes whose widths are not multiples of the alignment, so padding shows up.
ModelConfig small(Arch arch, bool tied) {
  ModelConfig c;
  c.name = "layout-test";
  c.arch = arch;
  c.vocab_size = 67;
  c.d_model = 24;
  c.n_layers = 3;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = arch == Arch::Qwen3 ? 10 : 6;
  c.ffn_dim = 36;
  c.max_seq = 32;
  c.tied_embeddings = tied;
  c.qkv_bias = arch != Arch::Llama;
  c.o_bias = arch == Arch::Qwen3;
  c.qk_norm = arch == Arch::Qwen3;
  return c;
}

int64_t offset_of(const ParamLayout& p, const std::string& name) {
  const ParamInfo* info = p.find(name);
  EXPECT_NE(info, nullptr) << name;
  return info ? info->offset : -1;
}

TEST(ParamLayout, NamesShapesAndCountMatchTheConfig) {
  for (Arch arch : {Arch::Llama, Arch::Qwen2, Arch::Qwen3})
    for (bool tied : {true, false}) {
      ModelConfig c = small(arch, tied);
      ParamLayout p = ParamLayout::build(c);
      int64_t numel = 0;
      for (const ParamInfo& i : p.params) numel += i.numel;
      EXPECT_EQ(numel, c.total_params());
      EXPECT_EQ(p.find("lm_head.weight") != nullptr, !tied);
      EXPECT_EQ(tied, p.lm_head == p.embed);
      EXPECT_EQ(p.find("model.layers.2.self_attn.q_proj.bias") != nullptr, c.qkv_bias);
      EXPECT_EQ(p.find("model.layers.2.self_attn.o_proj.bias") != nullptr, c.o_bias);
      EXPECT_EQ(p.find("model.layers.2.self_attn.q_norm.weight") != nullptr, c.qk_norm);
      const ParamInfo* o = p.find("model.layers.1.self_attn.o_proj.weight");
      ASSERT_NE(o, nullptr);
      EXPECT_EQ(o->shape, (std::vector<int64_t>{c.d_model, c.q_dim()}));
      EXPECT_TRUE(o->decay);
      EXPECT_FALSE(p.find("model.norm.weight")->decay);
      EXPECT_EQ(p.find("model.embed_tokens.weight")->shape, (std::vector<int64_t>{67, 24}));
    }
}

TEST(ParamLayout, FusedGroupsAreAdjacentAndAligned) {
  ModelConfig c = small(Arch::Qwen3, false);
  ParamLayout p = ParamLayout::build(c);
  const int64_t d = c.d_model, q = c.q_dim(), k = c.kv_dim(), f = c.ffn_dim;
  for (int l = 0; l < c.n_layers; l++) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    const LayerOffsets& o = p.layers[l];
    EXPECT_EQ(offset_of(p, pre + "self_attn.q_proj.weight"), o.qkv_w);
    EXPECT_EQ(offset_of(p, pre + "self_attn.k_proj.weight"), o.qkv_w + q * d);
    EXPECT_EQ(offset_of(p, pre + "self_attn.v_proj.weight"), o.qkv_w + q * d + k * d);
    EXPECT_EQ(offset_of(p, pre + "self_attn.q_proj.bias"), o.qkv_b);
    EXPECT_EQ(offset_of(p, pre + "self_attn.k_proj.bias"), o.qkv_b + q);
    EXPECT_EQ(offset_of(p, pre + "self_attn.v_proj.bias"), o.qkv_b + q + k);
    EXPECT_EQ(offset_of(p, pre + "mlp.gate_proj.weight"), o.gate_up_w);
    EXPECT_EQ(offset_of(p, pre + "mlp.up_proj.weight"), o.gate_up_w + f * d);
    EXPECT_EQ(offset_of(p, pre + "self_attn.q_norm.weight"), o.q_norm);
    EXPECT_EQ(offset_of(p, pre + "self_attn.k_norm.weight"), o.k_norm);
    EXPECT_EQ(offset_of(p, pre + "self_attn.o_proj.bias"), o.o_b);
    for (int64_t group : {o.attn_norm, o.qkv_w, o.qkv_b, o.q_norm, o.k_norm, o.o_w, o.o_b, o.mlp_norm, o.gate_up_w,
                          o.down_w})
      EXPECT_EQ(group % 64, 0);
  }
  EXPECT_EQ(p.total % 64, 0);
}

TEST(ParamLayout, TensorsDoNotOverlapAndFitTheBuffer) {
  ParamLayout p = ParamLayout::build(small(Arch::Qwen2, false));
  std::vector<ParamInfo> sorted = p.params;
  std::sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) { return a.offset < b.offset; });
  for (size_t i = 1; i < sorted.size(); i++)
    EXPECT_LE(sorted[i - 1].offset + sorted[i - 1].numel, sorted[i].offset) << sorted[i].name;
  EXPECT_LE(sorted.back().offset + sorted.back().numel, p.total);
}

TEST(ParamLayout, SegmentsCoverEveryTensorWithItsDecayFlag) {
  ParamLayout p = ParamLayout::build(small(Arch::Qwen3, false));
  std::vector<ParamSegment> segs = p.segments();
  for (size_t i = 1; i < segs.size(); i++) {
    EXPECT_NE(segs[i].decay, segs[i - 1].decay);  // neighbours with the same flag were merged
    EXPECT_LE(segs[i - 1].offset + segs[i - 1].count, segs[i].offset);
  }
  for (const ParamInfo& t : p.params) {
    auto covering = std::find_if(segs.begin(), segs.end(), [&](const ParamSegment& s) {
      return s.offset <= t.offset && t.offset + t.numel <= s.offset + s.count;
    });
    ASSERT_NE(covering, segs.end()) << t.name;
    EXPECT_EQ(covering->decay, t.decay) << t.name;
  }
}

TEST(ParamLayout, RealModelNeedsNoPadding) {
  // Every width of Qwen2.5-0.5B is a multiple of 64, so its layout is exactly its parameters.
  ModelConfig c = ModelConfig::preset("qwen2.5-0.5b");
  EXPECT_EQ(ParamLayout::build(c).total, c.total_params());
}

TEST(ParamLayout, RefusesAConfigPastTheLimitsBeforeLayingOutAnything) {
  ModelConfig c = small(Arch::Llama, true);
  c.n_layers = 1000000;
  EXPECT_THROW(ParamLayout::build(c), Error);
}

// A plan whose sizes overflow (a batch shape times an absurd width) is an error, not a wrapped size
// that would carve overlapping buffers out of a small allocation.
TEST(BufferCarver, RefusesSizesThatOverflow) {
  BufferCarver plan;
  plan.take(DType::F32, 1000);
  EXPECT_EQ(plan.used(), 4096u);
  EXPECT_THROW(plan.take(DType::F32, int64_t(1) << 62), Error);
  EXPECT_THROW(plan.take(DType::BF16, -1), Error);
  BufferCarver full;  // two buffers of nearly 2^63 bytes fill a 64-bit size; a third cannot follow
  full.take(DType::U8, INT64_MAX - 1024);
  full.take(DType::U8, INT64_MAX - 1024);
  EXPECT_THROW(full.take(DType::U8, INT64_MAX - 1024), Error);
}

}  // namespace
}  // namespace tk
