// Flag strings read into what they mean, in one place: --recompute, --offload, --moments, --fp8*, --schedule. Each
// is a tk::Error naming the flag and the values it takes for anything else; the names back are the types' own
// (Recompute::describe, Recipe::offload_name, moments_name, lr_decay_name).
#pragma once
#include <string>

#include "backend/backend.h"
#include "model/model.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"

namespace tk {

// The limits of the numeric step options, for the flags' help and the checks.
inline constexpr int kMaxFp8Margin = 8;
inline constexpr int kMaxLogitsChunkMib = 65536;

// "none", or any of norm, swiglu, attention, qkv, block joined by commas.
Recompute parse_recompute(const std::string& spec);

// --offload: none, optimizer or optimizer,gradients.
struct Offload {
  bool optimizer = false;  // AdamW's state and the fp32 master weights in host memory
  bool gradients = false;  // the parameter gradients too
};
Offload parse_offload(const std::string& name);

// --moments: f32, bf16 or int8.
MomentPrecision parse_moments(const std::string& name);

// --fp8, --fp8-scaling, --fp8-margin and --fp8-lm-head: a tk::Error for --fp8-lm-head without --fp8 and, with --fp8,
// for a scaling other than current or delayed or a margin outside 0 to kMaxFp8Margin.
MatmulPrecision parse_matmul_precision(bool fp8, const std::string& scaling, int margin, bool lm_head);

// --schedule: cosine, linear or wsd.
LrDecay parse_lr_decay(const std::string& name);

}  // namespace tk
