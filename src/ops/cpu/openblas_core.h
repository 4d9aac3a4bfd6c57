// Which OpenBLAS kernels the CPU backend runs. Debian's OpenBLAS picks its kernels when it is loaded, from
// the CPU's identity; on a CPU it does not know (0.3.21: Intel family 6 model 207) it falls back to its
// generic Prescott (SSE3) kernels, which train 3x slower than the AVX-512 ones the CPU could run. The
// entry point compares OpenBLAS's pick with what the CPU can run and, when the pick is generic, restarts
// with OPENBLAS_CORETYPE naming the right kernels.
#pragma once
#include <string>
#include <string_view>

namespace tk {

// What cpuid (and the OS, through XGETBV) says the CPU runs. All false on a CPU that is not x86-64.
struct CpuFeatures {
  std::string vendor;    // "GenuineIntel", "AuthenticAMD", ...
  int family = 0, model = 0;
  bool avx2 = false;     // AVX2 and FMA, with the YMM state enabled by the OS
  bool avx512 = false;   // AVX-512 F, CD, BW, DQ and VL (what OpenBLAS's SkylakeX kernels use), ZMM state enabled
};
CpuFeatures detect_cpu_features();
std::string describe(const CpuFeatures& cpu);  // "GenuineIntel family 6 model 207, AVX-512"

// The core type whose kernels OpenBLAS uses in this process ("Cooperlake", "Prescott", ...), and whether this
// OpenBLAS chooses among several at all (DYNAMIC_ARCH: only then does OPENBLAS_CORETYPE mean anything).
std::string openblas_core();
bool openblas_chooses_core();

// The OPENBLAS_CORETYPE to run with when OpenBLAS picked `picked` on `cpu`: "SkylakeX" on a CPU with AVX-512,
// "Haswell" on one with AVX2, when OpenBLAS's pick uses neither; "" when its pick is already as good
// (Haswell, Zen, SkylakeX, Cooperlake, ... : kernels of the CPU's own generation are left alone).
std::string better_openblas_core(const CpuFeatures& cpu, std::string_view picked);

}  // namespace tk
