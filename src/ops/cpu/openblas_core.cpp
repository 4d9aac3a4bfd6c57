// OpenBLAS's kernel choice against the CPU's features: cpuid leaves 1 and 7 for the instruction sets,
// XGETBV for the register state the OS saves (an instruction set the OS does not enable cannot run).
#include "ops/cpu/openblas_core.h"

#include <cblas.h>

#include <array>
#include <cstring>

#include <fmt/format.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace tk {
namespace {

// OpenBLAS's core types whose kernels use AVX2 and FMA or AVX-512: a pick among them fits the CPU.
constexpr std::array<std::string_view, 6> kVectorCores = {"Haswell",  "Zen",        "Excavator",
                                                          "SkylakeX", "Cooperlake", "SapphireRapids"};

#if defined(__x86_64__) || defined(__i386__)
uint64_t enabled_register_state() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}
#endif

}  // namespace

CpuFeatures detect_cpu_features() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
  const unsigned max_leaf = a;
  char vendor[13] = {};
  std::memcpy(vendor, &b, 4), std::memcpy(vendor + 4, &d, 4), std::memcpy(vendor + 8, &c, 4);
  f.vendor = vendor;
  __get_cpuid(1, &a, &b, &c, &d);
  const int base_family = int(a >> 8) & 0xf, ext_family = int(a >> 20) & 0xff;
  const int base_model = int(a >> 4) & 0xf, ext_model = int(a >> 16) & 0xf;
  f.family = base_family == 0xf ? base_family + ext_family : base_family;
  f.model = base_family == 6 || base_family == 0xf ? (ext_model << 4) | base_model : base_model;
  const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28);
  if (!osxsave || !avx || max_leaf < 7) return f;
  const uint64_t state = enabled_register_state();
  const bool ymm = (state & 0x6) == 0x6, zmm = (state & 0xe6) == 0xe6;  // + opmask, ZMM_Hi256, Hi16_ZMM
  __get_cpuid_count(7, 0, &a, &b, &c, &d);
  auto bit = [&](int i) { return (b >> i) & 1u; };
  f.avx2 = ymm && fma && bit(5);
  f.avx512 = f.avx2 && zmm && bit(16) && bit(17) && bit(28) && bit(30) && bit(31);  // F, DQ, CD, BW, VL
#endif
  return f;
}

std::string describe(const CpuFeatures& cpu) {
  if (cpu.vendor.empty()) return "not x86-64";
  return fmt::format("{} family {} model {}, {}", cpu.vendor, cpu.family, cpu.model,
                     cpu.avx512 ? "AVX-512" : cpu.avx2 ? "AVX2" : "neither AVX2 nor AVX-512");
}

std::string openblas_core() { return openblas_get_corename(); }

bool openblas_chooses_core() { return std::strstr(openblas_get_config(), "DYNAMIC_ARCH") != nullptr; }

std::string better_openblas_core(const CpuFeatures& cpu, std::string_view picked) {
  if (!cpu.avx2) return "";
  for (std::string_view core : kVectorCores)
    if (picked == core) return "";
  return cpu.avx512 ? "SkylakeX" : "Haswell";
}

}  // namespace tk
