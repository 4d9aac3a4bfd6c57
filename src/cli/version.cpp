// `tokamak info`: what this build contains (backends, CUDA devices, MPI and NCCL for many ranks), how this process
// was launched, and the CPU settings it runs with (the CPU, OpenBLAS's kernels, OpenMP's wait policy) — the first
// thing to ask in a bug report.
#include <fmt/format.h>

#include <cstdlib>

#include "cli/command.h"
#include "dist/session.h"
#include "dist/world.h"
#include "ops/cpu/openblas_core.h"

#ifdef TK_HAVE_NCCL
#include "dist/nccl/nccl_communicator.h"
#endif

namespace {
tk::cli::Command info_cmd("info", "Print the build's backends and version", [](CLI::App&) -> tk::cli::Runner {
  return [] {
    fmt::print("tokamak {}\n", TOKAMAK_VERSION);
#ifdef TK_HAVE_CUDA
    fmt::print("backends: cpu, cuda\n");
#else
    fmt::print("backends: cpu\n");
#endif
    fmt::print("MPI: {}\n", tk::dist::mpi_library_version());
#ifdef TK_HAVE_NCCL
    fmt::print("NCCL: {}\n", tk::dist::nccl_version());
#else
    fmt::print("NCCL: none (multi-GPU runs need a CUDA build with NCCL)\n");
#endif
    fmt::print("launch: {}\n", tk::dist::read_world().describe());
    // The CPU backend's speed depends on these (main.cpp sets both unless the user did).
    const char* coretype = std::getenv("OPENBLAS_CORETYPE");
    fmt::print("cpu: {}\n", tk::describe(tk::detect_cpu_features()));
    fmt::print("openblas: {} kernels ({})\n", tk::openblas_core(),
               coretype ? fmt::format("OPENBLAS_CORETYPE={}", coretype) : std::string("OpenBLAS's own choice"));
    const char* wait = std::getenv("OMP_WAIT_POLICY");
    fmt::print("openmp: OMP_WAIT_POLICY={}\n", wait ? wait : "unset");
    return 0;
  };
});
}  // namespace
