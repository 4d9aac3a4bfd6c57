// `tokamak info`: what this build contains (backends, CUDA devices, MPI and NCCL for many ranks) and how this process
// was launched — the first thing to ask in a bug report.
#include <fmt/format.h>

#include "cli/command.h"
#include "dist/session.h"
#include "dist/world.h"

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
    return 0;
  };
});
}  // namespace
