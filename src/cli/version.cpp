// `tokamak info`: what this build contains (backends, CUDA devices) — the first thing to ask in a bug report.
#include <fmt/format.h>

#include "cli/command.h"

namespace {
tk::cli::Command info_cmd("info", "Print the build's backends and version", [](CLI::App&) -> tk::cli::Runner {
  return [] {
    fmt::print("tokamak {}\n", TOKAMAK_VERSION);
#ifdef TK_HAVE_CUDA
    fmt::print("backends: cpu, cuda\n");
#else
    fmt::print("backends: cpu\n");
#endif
    return 0;
  };
});
}  // namespace
