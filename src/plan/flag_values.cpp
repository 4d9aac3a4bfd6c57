// Flag strings read into what they mean (flag_values.h).
#include "plan/flag_values.h"

#include <algorithm>

#include "core/error.h"

namespace tk {

Recompute parse_recompute(const std::string& spec) {
  Recompute r;
  size_t at = 0;
  while (at <= spec.size()) {
    const size_t comma = std::min(spec.find(',', at), spec.size());
    const std::string name = spec.substr(at, comma - at);
    if (name == "norm") r.norm = true;
    else if (name == "swiglu") r.swiglu = true;
    else if (name == "attention") r.attention = true;
    else if (name == "qkv") r.qkv = true;
    else if (name == "block") r.block = true;
    else if (name != "none" && !name.empty())
      fail("unknown recompute policy '{}' in '{}': use none, or any of norm, swiglu, attention, qkv, block joined by commas",
           name, spec);
    at = comma + 1;
  }
  return r;
}

Offload parse_offload(const std::string& name) {
  TK_CHECK(name == "none" || name == "optimizer" || name == "optimizer,gradients",
           "--offload must be none, optimizer or optimizer,gradients, not '{}'", name);
  return {name != "none", name == "optimizer,gradients"};
}

MomentPrecision parse_moments(const std::string& name) {
  if (name == "f32") return MomentPrecision::F32;
  if (name == "bf16") return MomentPrecision::BF16;
  if (name == "int8") return MomentPrecision::Int8;
  fail("--moments must be f32, bf16 or int8, not '{}'", name);
}

MatmulPrecision parse_matmul_precision(bool fp8, const std::string& scaling, int margin, bool lm_head) {
  TK_CHECK(!lm_head || fp8, "--fp8-lm-head puts the LM head's GEMMs in FP8 with the linears': it needs --fp8");
  TK_CHECK(scaling == "current" || scaling == "delayed", "--fp8-scaling is '{}': it must be current or delayed",
           scaling);
  TK_CHECK(margin >= 0 && margin <= kMaxFp8Margin, "--fp8-margin is {}: it must be 0 to {}", margin, kMaxFp8Margin);
  return {fp8, scaling == "delayed", margin, lm_head};
}

LrDecay parse_lr_decay(const std::string& name) {
  if (name == "cosine") return LrDecay::Cosine;
  if (name == "linear") return LrDecay::Linear;
  if (name == "wsd") return LrDecay::WarmupStableDecay;
  fail("unknown learning-rate schedule '{}': expected cosine, linear or wsd", name);
}

}  // namespace tk
