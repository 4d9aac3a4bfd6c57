// The GPU table: a user's name finds one card (exactly, or by its CUDA device name), a prefix only candidates, and the
// cards the planner promises are there, with FP8 exactly where the compute capability has it, their host links and
// the room kept for a display.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "plan/gpu_specs.h"
#include "plan/memory_plan.h"
#include "plan/zero_plan.h"

namespace tk {
namespace {

bool has_name(const std::string& list, const std::string& name) {
  return (", " + list + ", ").find(", " + name + ", ") != std::string::npos;
}

// The card the text names, or the candidates it begins (each list of one name per card).
std::vector<std::string> names(const std::string& text) {
  const GpuLookup found = find_gpu_spec(text);
  if (found.card) return {found.card->name};
  std::vector<std::string> out;
  for (const GpuSpec* g : found.candidates) out.push_back(std::string("begins ") + g->name);
  return out;
}

using Names = std::vector<std::string>;

TEST(GpuSpecs, NamesFindOneCard) {
  EXPECT_EQ(names("RTX 4080"), Names{"RTX 4080"});  // exact, though "RTX 4080 SUPER" begins with it
  EXPECT_EQ(names("rtx 4080 super"), Names{"RTX 4080 SUPER"});
  EXPECT_EQ(names("NVIDIA GeForce RTX 4090"), Names{"RTX 4090"});
  EXPECT_EQ(names("H200"), Names{"H200"});
  EXPECT_EQ(names("NVIDIA A100-SXM4-40GB"), Names{"A100 40GB"});  // the CUDA device name
  EXPECT_EQ(names("NVIDIA A100-SXM4-80GB"), Names{"A100 80GB"});
  EXPECT_EQ(names("NVIDIA H100 80GB HBM3"), Names{"H100 SXM"});
  EXPECT_TRUE(names("Voodoo 5").empty());
}

// A name that only begins cards' names is no card's: "RTX 4070" once found the 16 GB RTX 4070 Ti SUPER for a 12 GB
// card, and "RTX 3060" has an 8 GB model the table lacks.
TEST(GpuSpecs, APrefixIsNeverACard) {
  EXPECT_EQ(names("RTX 4070"), Names{"RTX 4070"});
  EXPECT_EQ(find_gpu_spec("RTX 4070").card->memory_gib, 12);
  EXPECT_EQ(names("RTX 4070 Ti"), Names{"RTX 4070 Ti"});
  EXPECT_EQ(names("RTX 3060"), Names{"begins RTX 3060 12GB"});
  EXPECT_EQ(names("a100 80"), Names{"begins A100 80GB"});
  EXPECT_EQ(names("h100"), (Names{"begins H100 NVL", "begins H100 PCIe", "begins H100 SXM"}));
  EXPECT_EQ(names("rtx 507"), (Names{"begins RTX 5070 Ti", "begins RTX 5070"}));
  // A CUDA device name finds the most specific key: a 4070 Ti is not a 4070, a 3080 Ti not a 3080.
  EXPECT_EQ(std::string(gpu_spec_by_device_name("NVIDIA GeForce RTX 4070 Ti")->name), "RTX 4070 Ti");
  EXPECT_EQ(std::string(gpu_spec_by_device_name("NVIDIA GeForce RTX 4070 SUPER")->name), "RTX 4070 SUPER");
  EXPECT_EQ(std::string(gpu_spec_by_device_name("NVIDIA GeForce RTX 4070")->name), "RTX 4070");
  EXPECT_EQ(std::string(gpu_spec_by_device_name("NVIDIA GeForce RTX 3080 Ti")->name), "RTX 3080 Ti");
  EXPECT_EQ(std::string(gpu_spec_by_device_name("NVIDIA GeForce RTX 5070 Ti")->name), "RTX 5070 Ti");
  EXPECT_EQ(std::string(gpu_spec_by_device_name("NVIDIA GeForce RTX 5070")->name), "RTX 5070");
  EXPECT_TRUE(has_name(gpu_names(), "RTX 5070 Ti") && has_name(gpu_names(), "RTX 3080 Ti"));
}

// Offload's host link by the card's PCIe generation and lanes; room for the display on cards that drive one.
TEST(GpuSpecs, HostLinkAndDisplayHeadroom) {
  const auto card = [](const char* name) { return *find_gpu_spec(name).card; };
  for (const char* pcie4 : {"RTX 4080", "RTX 4090", "RTX 3090", "A100 80GB", "L40S"}) {
    EXPECT_EQ(host_bandwidth(card(pcie4)), PlanTarget{}.host_bandwidth / 2) << pcie4;
    EXPECT_EQ(plan_target_for(card(pcie4)).host_bandwidth, PlanTarget{}.host_bandwidth / 2) << pcie4;
  }
  for (const char* pcie5 : {"H100 SXM", "H200", "RTX 5090", "RTX 5070"})
    EXPECT_EQ(host_bandwidth(card(pcie5)), PlanTarget{}.host_bandwidth) << pcie5;
  EXPECT_EQ(host_bandwidth(card("RTX 4060 Ti 16GB")), PlanTarget{}.host_bandwidth / 4);  // PCIe 4 x8
  const double GiB = double(1ull << 30);
  EXPECT_EQ(plan_budget_bytes(card("RTX 4080")), 15 * GiB);
  EXPECT_EQ(plan_budget_bytes(card("RTX 6000 Ada")), 47 * GiB);
  EXPECT_EQ(plan_budget_bytes(card("H100 SXM")), 80 * GiB);
  EXPECT_EQ(plan_budget_bytes(card("L4")), 24 * GiB);
}

TEST(GpuSpecs, TheCardsPlannedForAreThere) {
  for (const char* card : {"RTX 3060 12GB", "RTX 3080", "RTX 3080 Ti", "RTX 3090", "RTX 4060 Ti 16GB", "RTX 4070",
                           "RTX 4070 Ti SUPER", "RTX 4080", "RTX 4090", "RTX 5070", "RTX 5070 Ti", "RTX 5080",
                           "RTX 5090", "A10", "A100 40GB", "A100 80GB", "L4", "L40S", "H100 SXM", "H100 PCIe", "H200"}) {
    const GpuLookup found = find_gpu_spec(card);
    ASSERT_TRUE(found.card) << card;
    const GpuSpec& g = *found.card;
    EXPECT_GT(g.memory_gib, 0) << card;
    EXPECT_GT(g.bandwidth_gbs, 0) << card;
    EXPECT_GT(g.bf16_tflops, 0) << card;
    EXPECT_GT(g.sms, 0) << card;
  }
  for (const GpuSpec& g : gpu_specs()) {
    EXPECT_EQ(g.fp8_tensor_cores(), g.cc_major * 10 + g.cc_minor >= 89) << g.name;
    if (g.fp8_tensor_cores()) EXPECT_NEAR(g.fp8_tflops / g.bf16_tflops, 2.0, 0.03) << g.name;
    EXPECT_GT(interconnect_bandwidth(g.link), 0) << g.name;  // a link `plan --interconnect` names
    EXPECT_TRUE(g.pcie_gen == 4 || g.pcie_gen == 5) << g.name;
    EXPECT_TRUE(g.pcie_lanes == 8 || g.pcie_lanes == 16) << g.name;
  }
  // SXM boards link their GPUs by NVLink; PCIe cards, consumer ones above all, by PCIe.
  EXPECT_EQ(std::string(find_gpu_spec("H100 SXM").card->link), "nvlink");
  EXPECT_EQ(std::string(find_gpu_spec("H100 PCIe").card->link), "pcie5");
  EXPECT_EQ(std::string(find_gpu_spec("RTX 4080").card->link), "pcie4");
  EXPECT_EQ(plan_target_for(*find_gpu_spec("RTX 4080").card).link_bandwidth, kPcie4BusBandwidth);
  EXPECT_EQ(find_gpu_spec("RTX 4080").card->memory_gib, 16);
  EXPECT_EQ(find_gpu_spec("RTX 3060 12GB").card->memory_gib, 12);
}

}  // namespace
}  // namespace tk
