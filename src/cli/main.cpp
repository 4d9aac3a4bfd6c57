// tokamak's entry point: parses the subcommand, runs it, and turns any tk::Error into one clear
// line on stderr and a non-zero exit.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>

#include "cli/command.h"
#include "core/error.h"
#include "core/log.h"

namespace tk::cli {

std::vector<Registered>& registry() {
  static std::vector<Registered> r;
  return r;
}

Command::Command(std::string name, std::string help, Setup setup) {
  registry().push_back({std::move(name), std::move(help), std::move(setup)});
}

}  // namespace tk::cli

// OpenMP threads that spin after a parallel region steal the cores OpenBLAS's threads need next: on
// 2 cores the CPU backend runs 1.6x faster with passive waiting. libgomp reads the policy when it is
// loaded, before main, so it is set here and the program started again, once.
static void prefer_passive_openmp_waits(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  setenv("OMP_WAIT_POLICY", "passive", 1);
  execv("/proc/self/exe", argv);  // returns only on failure: then carry on with the default policy
}

int main(int argc, char** argv) {
  prefer_passive_openmp_waits(argv);
  CLI::App app{"tokamak: trains Llama-family language models at the speed the hardware allows, and says what bounds them"};
  app.set_version_flag("--version", std::string("tokamak ") + TOKAMAK_VERSION);
  app.require_subcommand(1);
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "Debug logging");
  std::map<CLI::App*, tk::cli::Runner> runners;
  for (auto& c : tk::cli::registry()) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    runners[sub] = c.setup(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (verbose) tk::log::set_level(tk::log::Level::Debug);
  try {
    for (auto& [sub, run] : runners)
      if (sub->parsed()) return run();
  } catch (const tk::Error& e) {
    tk::log::error("{}", e.what());
    return 1;
  } catch (const std::exception& e) {
    tk::log::error("internal error: {}", e.what());
    return 2;
  }
  return 0;
}
