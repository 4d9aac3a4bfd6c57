// The GPU table: a user's name finds one card (exactly, by a unique prefix, or by its CUDA device name), an
// ambiguous one finds them all, and the cards the planner promises are there, with FP8 exactly where the compute
// capability has it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "plan/gpu_specs.h"
#include "plan/memory_plan.h"
#include "plan/zero_plan.h"

namespace tk {
namespace {

std::vector<std::string> names(const std::string& text) {
  std::vector<std::string> out;
  for (const GpuSpec* g : find_gpu_specs(text)) out.push_back(g->name);
  return out;
}

using Names = std::vector<std::string>;

TEST(GpuSpecs, NamesFindOneCard) {
  EXPECT_EQ(names("RTX 4080"), Names{"RTX 4080"});  // exact, though "RTX 4080 SUPER" begins with it
  EXPECT_EQ(names("rtx 4080 super"), Names{"RTX 4080 SUPER"});
  EXPECT_EQ(names("NVIDIA GeForce RTX 4090"), Names{"RTX 4090"});
  EXPECT_EQ(names("RTX 3060"), Names{"RTX 3060 12GB"});
  EXPECT_EQ(names("a100 80"), Names{"A100 80GB"});
  EXPECT_EQ(names("H200"), Names{"H200"});
  EXPECT_EQ(names("NVIDIA A100-SXM4-40GB"), Names{"A100 40GB"});  // the CUDA device name
  EXPECT_EQ(names("NVIDIA A100-SXM4-80GB"), Names{"A100 80GB"});
  EXPECT_EQ(names("NVIDIA H100 80GB HBM3"), Names{"H100 SXM"});
  EXPECT_EQ(names("h100"), (Names{"H100 NVL", "H100 PCIe", "H100 SXM"}));
  EXPECT_TRUE(names("Voodoo 5").empty());
}

TEST(GpuSpecs, TheCardsPlannedForAreThere) {
  for (const char* card : {"RTX 3060 12GB", "RTX 3080", "RTX 3090", "RTX 4060 Ti 16GB", "RTX 4070 Ti SUPER", "RTX 4080",
                           "RTX 4090", "RTX 5080", "RTX 5090", "A10", "A100 40GB", "A100 80GB", "L4", "L40S", "H100 SXM",
                           "H100 PCIe", "H200"}) {
    const std::vector<const GpuSpec*> found = find_gpu_specs(card);
    ASSERT_EQ(found.size(), 1u) << card;
    const GpuSpec& g = *found[0];
    EXPECT_GT(g.memory_gib, 0) << card;
    EXPECT_GT(g.bandwidth_gbs, 0) << card;
    EXPECT_GT(g.bf16_tflops, 0) << card;
  }
  for (const GpuSpec& g : gpu_specs()) {
    EXPECT_EQ(g.fp8_tensor_cores(), g.cc_major * 10 + g.cc_minor >= 89) << g.name;
    if (g.fp8_tensor_cores()) EXPECT_NEAR(g.fp8_tflops / g.bf16_tflops, 2.0, 0.03) << g.name;
    EXPECT_GT(interconnect_bandwidth(g.link), 0) << g.name;  // a link `plan --interconnect` names
  }
  // SXM boards link their GPUs by NVLink; PCIe cards, consumer ones above all, by PCIe.
  EXPECT_EQ(std::string(find_gpu_specs("H100 SXM")[0]->link), "nvlink");
  EXPECT_EQ(std::string(find_gpu_specs("H100 PCIe")[0]->link), "pcie5");
  EXPECT_EQ(std::string(find_gpu_specs("RTX 4080")[0]->link), "pcie4");
  EXPECT_EQ(plan_target_for(*find_gpu_specs("RTX 4080")[0]).link_bandwidth, kPcie4BusBandwidth);
  EXPECT_EQ(find_gpu_specs("RTX 4080")[0]->memory_gib, 16);
  EXPECT_EQ(find_gpu_specs("RTX 3060")[0]->memory_gib, 12);
}

}  // namespace
}  // namespace tk
