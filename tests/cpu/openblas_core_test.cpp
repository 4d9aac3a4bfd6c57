// OpenBLAS's kernels: the choice of a core type from given CPU features and OpenBLAS's own pick, the
// features read by cpuid against /proc/cpuinfo's flags, and the restart of the built binary, which must
// keep its arguments, standard input and environment, and respect a user's OPENBLAS_CORETYPE.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/fs.h"
#include "ops/cpu/openblas_core.h"

namespace {

tk::CpuFeatures cpu(int family, int model, bool avx2, bool avx512) {
  return {"GenuineIntel", family, model, avx2, avx512};
}

TEST(OpenblasCore, GenericKernelsOnAnAvx512CpuBecomeSkylakeX) {
  // The machine the slowdown was seen on: Intel family 6 model 207, which OpenBLAS 0.3.21 does not know.
  EXPECT_EQ(tk::better_openblas_core(cpu(6, 207, true, true), "Prescott"), "SkylakeX");
  EXPECT_EQ(tk::better_openblas_core(cpu(6, 207, true, true), "Nehalem"), "SkylakeX");
  EXPECT_EQ(tk::better_openblas_core(cpu(6, 207, true, true), "Sandybridge"), "SkylakeX");
}

TEST(OpenblasCore, GenericKernelsOnAnAvx2CpuBecomeHaswell) {
  EXPECT_EQ(tk::better_openblas_core(cpu(6, 190, true, false), "Prescott"), "Haswell");
  EXPECT_EQ(tk::better_openblas_core(cpu(6, 190, true, false), "Core2"), "Haswell");
}

TEST(OpenblasCore, AGoodPickIsLeftAlone) {
  for (const char* core : {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids", "Excavator"}) {
    EXPECT_EQ(tk::better_openblas_core(cpu(6, 207, true, true), core), "") << core;
    EXPECT_EQ(tk::better_openblas_core({"AuthenticAMD", 25, 17, true, true}, core), "") << core;
  }
}

TEST(OpenblasCore, ACpuWithoutAvx2KeepsOpenblasChoice) {
  EXPECT_EQ(tk::better_openblas_core(cpu(6, 42, false, false), "Prescott"), "");
  EXPECT_EQ(tk::better_openblas_core(tk::CpuFeatures{}, "Prescott"), "");  // not x86-64: nothing known
}

// The first "flags" line of /proc/cpuinfo, as a set.
std::set<std::string> cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::set<std::string> flags;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    for (std::string w; words >> w;) flags.insert(w);
    break;
  }
  return flags;
}

TEST(OpenblasCore, CpuidAgreesWithProcCpuinfo) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "cpuid is x86-64 only";
#endif
  const std::set<std::string> flags = cpuinfo_flags();
  if (flags.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags";
  const tk::CpuFeatures f = tk::detect_cpu_features();
  EXPECT_EQ(f.avx2, flags.count("avx2") && flags.count("fma"));
  bool avx512 = true;
  for (const char* s : {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}) avx512 = avx512 && flags.count(s);
  EXPECT_EQ(f.avx512, avx512);
  EXPECT_FALSE(f.vendor.empty());
}

TEST(OpenblasCore, OpenblasNamesItsCore) {
  EXPECT_FALSE(tk::openblas_core().empty());
}

// ---- the built binary ---------------------------------------------------------------------------------

const std::string kTokamak = std::string(TK_BINARY_DIR) + "/tokamak";
const std::string kGpt2Dir = std::string(TK_SOURCE_DIR) + "/.cache/gpt2";
const std::string kWork = std::string(TK_BINARY_DIR) + "/openblas_core_test_files";

struct Output {
  int status;
  std::string out, err;
};

// `env ENV tokamak ARGS < input`, with stdout and stderr captured.
Output tokamak(const std::string& env, const std::string& args, const std::string& input = "") {
  std::filesystem::create_directories(kWork);
  std::ofstream(kWork + "/in", std::ios::binary) << input;
  const std::string cmd = "env " + env + " " + kTokamak + " " + args + " < " + kWork + "/in > " + kWork +
                          "/out 2> " + kWork + "/err";
  const int status = std::system(cmd.c_str());
  return {WEXITSTATUS(status), tk::fs::read_file(kWork + "/out"), tk::fs::read_file(kWork + "/err")};
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) n++;
  return n;
}

class RestartTest : public testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kTokamak)) GTEST_SKIP() << kTokamak << " is not built";
  }
};

// OpenBLAS prints "Core: ..." each time it is loaded with OPENBLAS_VERBOSE=2: twice when the program restarts.
// The restarted process gets the arguments (the tokenizer, the command), the standard input (the text) and the
// environment (OPENBLAS_VERBOSE, and the variable the first process set).
TEST_F(RestartTest, KeepsArgumentsInputAndEnvironment) {
  ASSERT_TRUE(std::filesystem::exists(kGpt2Dir + "/encoder.json")) << "run scripts/setup.sh";
  const std::string pinned = "OPENBLAS_CORETYPE=Haswell OPENBLAS_VERBOSE=2";
  Output restarted = tokamak("-u OMP_WAIT_POLICY " + pinned, "tokenize --tokenizer " + kGpt2Dir, "Hello world");
  ASSERT_EQ(restarted.status, 0) << restarted.err;
  EXPECT_EQ(restarted.out, "15496 995\n");
  EXPECT_EQ(count(restarted.err, "Core: Haswell"), 2u) << restarted.err;

  Output once = tokamak("OMP_WAIT_POLICY=active " + pinned, "tokenize --tokenizer " + kGpt2Dir, "Hello world");
  ASSERT_EQ(once.status, 0) << once.err;
  EXPECT_EQ(once.out, "15496 995\n");
  EXPECT_EQ(count(once.err, "Core: Haswell"), 1u) << once.err;  // nothing to set: no restart
}

// OpenBLAS's generic pick, made by a preloaded library that answers openblas_get_corename() with "Prescott":
// on a CPU with AVX2 or AVX-512 the program says so in one line and restarts once with the better kernels.
TEST_F(RestartTest, AGenericPickIsReplacedOnce) {
  const tk::CpuFeatures cpu = tk::detect_cpu_features();
  if (!cpu.avx2) GTEST_SKIP() << "this CPU has no AVX2: OpenBLAS's pick stands";
  std::filesystem::create_directories(kWork);
  tk::fs::write_file_atomic(kWork + "/prescott.cpp",
                            "extern \"C\" char* openblas_get_corename() { return (char*)\"Prescott\"; }\n");
  const std::string shim = kWork + "/libprescott.so";
  if (std::system(("c++ -shared -fPIC -o " + shim + " " + kWork + "/prescott.cpp 2>/dev/null").c_str()) != 0)
    GTEST_SKIP() << "no C++ compiler to build the preloaded library with";
  const std::string want = cpu.avx512 ? "SkylakeX" : "Haswell";
  Output r = tokamak("-u OPENBLAS_CORETYPE OPENBLAS_VERBOSE=2 LD_PRELOAD=" + shim, "info");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(count(r.err, "OpenBLAS chose its generic Prescott kernels"), 1u) << r.err;
  EXPECT_NE(r.err.find("using its " + want + " kernels (OPENBLAS_CORETYPE=" + want + ";"), std::string::npos) << r.err;
  EXPECT_EQ(count(r.err, "Core: "), 2u) << r.err;  // loaded twice: one restart
  EXPECT_NE(r.err.find("Core: " + want), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("(OPENBLAS_CORETYPE=" + want + ")"), std::string::npos) << r.out;

  // A user's choice stands, whatever OpenBLAS picked.
  r = tokamak("OPENBLAS_CORETYPE=Haswell OPENBLAS_VERBOSE=2 LD_PRELOAD=" + shim, "info");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err.find("OpenBLAS chose"), std::string::npos) << r.err;
}

TEST_F(RestartTest, InfoSaysWhichKernelsAndWaitPolicy) {
  Output user = tokamak("-u OMP_WAIT_POLICY OPENBLAS_CORETYPE=Haswell", "info");
  ASSERT_EQ(user.status, 0) << user.err;
  EXPECT_NE(user.out.find("openblas: Haswell kernels (OPENBLAS_CORETYPE=Haswell)"), std::string::npos) << user.out;
  EXPECT_NE(user.out.find("openmp: OMP_WAIT_POLICY=passive"), std::string::npos) << user.out;
  EXPECT_NE(user.out.find("cpu: "), std::string::npos) << user.out;

  Output own = tokamak("-u OPENBLAS_CORETYPE OMP_WAIT_POLICY=active", "info");
  ASSERT_EQ(own.status, 0) << own.err;
  EXPECT_NE(own.out.find("openmp: OMP_WAIT_POLICY=active"), std::string::npos) << own.out;
  if (tk::better_openblas_core(tk::detect_cpu_features(), tk::openblas_core()).empty()) {
    EXPECT_NE(own.out.find("kernels (OpenBLAS's own choice)"), std::string::npos) << own.out;
    EXPECT_EQ(own.err, "");  // no line about the kernels when OpenBLAS's pick is kept
  } else {
    EXPECT_NE(own.err.find("OpenBLAS chose its generic"), std::string::npos) << own.err;
    EXPECT_NE(own.out.find("kernels (OPENBLAS_CORETYPE="), std::string::npos) << own.out;
  }
}

}  // namespace
