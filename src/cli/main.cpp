// tokamak's entry point: parses the subcommand, runs it, and turns any tk::Error into one clear
// line on stderr and a non-zero exit.
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <string>

#include "cli/command.h"
#include "core/error.h"
#include "core/log.h"
#include "dist/agreement.h"
#include "dist/communicator.h"
#include "dist/launch.h"
#include "dist/session.h"
#include "ops/backend.h"
#include "ops/cpu/openblas_core.h"

namespace tk::cli {

std::vector<Registered>& registry() {
  static std::vector<Registered> r;
  return r;
}

Command::Command(std::string name, std::string help, Setup setup) {
  registry().push_back({std::move(name), std::move(help), std::move(setup)});
}

}  // namespace tk::cli

// Settings that the libraries read once, when they are loaded (before main): they are set here and the
// program started again, once, with the same arguments and environment plus these.
//  - OpenMP threads that spin after a parallel region steal the cores OpenBLAS's threads need next: on
//    2 cores the CPU backend runs 1.6x faster with passive waiting (OMP_WAIT_POLICY).
//  - OpenBLAS falls back to generic kernels on CPUs it does not know (ops/cpu/openblas_core.h): on a CPU with
//    AVX2 or AVX-512 that it has not matched, OPENBLAS_CORETYPE names the kernels the CPU can run.
// A user's own setting of either is kept.
static void restart_with_library_settings(char** argv) {
  bool restart = false;
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    setenv("OMP_WAIT_POLICY", "passive", 1);
    restart = true;
  }
  std::string picked, core;
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr && tk::openblas_chooses_core()) {
    const tk::CpuFeatures cpu = tk::detect_cpu_features();
    picked = tk::openblas_core();
    core = tk::better_openblas_core(cpu, picked);
    if (!core.empty()) {
      setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
      tk::log::info("OpenBLAS chose its generic {} kernels for this CPU ({}): using its {} kernels "
                    "(OPENBLAS_CORETYPE={}; set OPENBLAS_CORETYPE to choose others)",
                    picked, tk::describe(cpu), core, core);
      restart = true;
    }
  }
  if (!restart) return;
  execv("/proc/self/exe", argv);  // returns only on failure: then carry on as loaded
  if (!core.empty())
    tk::log::warn("cannot restart tokamak ({}): OpenBLAS keeps its {} kernels; run with OPENBLAS_CORETYPE={}",
                  std::strerror(errno), picked, core);
}

// The commands that run on many ranks: `--gpus N` starts N of them on this host; mpirun and srun start them anywhere.
static bool runs_on_ranks(const std::string& command) {
  return command == "train" || command == "profile" || command == "bench";
}

// Training on many ranks comes with the ZeRO stages. Until then, the ranks of such a run start, connect, check that
// they were given the same command, and all stop here with this error.
static int stop_before_data_parallel(const tk::dist::Session& session, const CLI::App& command, int argc,
                                     char** argv) {
  const bool gpu = tk::backend_is_gpu(command.get_option("--device")->as<std::string>());
  auto comm = tk::dist::make_communicator(session, gpu);
  std::string args;
  for (int i = 1; i < argc; i++) args.append(argv[i]).push_back('\0');
  tk::dist::Fingerprint given;
  given.add("tokamak version", TOKAMAK_VERSION).add("command line", args);
  tk::dist::require_agreement(*comm, given);
  tk::fail("the {} ranks started and agree, but `tokamak {}` on more than one rank comes with the ZeRO stages, which "
           "this version does not have yet: run it on one GPU (without --gpus) or as one process",
           comm->world_size(), command.get_name());
}

int main(int argc, char** argv) {
  restart_with_library_settings(argv);
  // Past a file size limit (ulimit -f) the kernel sends SIGXFSZ, which would end the process without a word:
  // ignored, the write fails with EFBIG instead, and is reported (with the file) like any other write error.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"tokamak: trains Llama-family language models at the speed the hardware allows, and says what bounds them"};
  app.set_version_flag("--version", std::string("tokamak ") + TOKAMAK_VERSION);
  app.require_subcommand(1);
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "Debug logging");
  std::map<CLI::App*, tk::cli::Runner> runners;
  int gpus = 1;
  for (auto& c : tk::cli::registry()) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    runners[sub] = c.setup(*sub);
    if (runs_on_ranks(c.name))
      sub->add_option("--gpus", gpus,
                      "Run on N GPUs of this host: one process per GPU, started and watched by this one "
                      "(docs/distributed.md; across hosts, start the ranks with mpirun or srun instead)")
          ->check(CLI::PositiveNumber);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (verbose) tk::log::set_level(tk::log::Level::Debug);
  try {
    for (auto& [sub, run] : runners) {
      if (!sub->parsed()) continue;
      const tk::dist::World launched = tk::dist::read_world();
      if (gpus > 1 && launched.launcher != tk::dist::Launcher::tokamak) {
        TK_CHECK(sub->get_option("--device")->as<std::string>() != "cpu",
                 "--gpus {} runs one process per GPU; for ranks on the CPU use mpirun -np {} tokamak ... --device cpu",
                 gpus, gpus);
        return tk::dist::launch_local_ranks(std::vector<std::string>(argv, argv + argc), gpus);
      }
      tk::dist::Session session(launched);
      if (session.world().size > 1 && runs_on_ranks(sub->get_name()))
        return stop_before_data_parallel(session, *sub, argc, argv);
      return session.finish(run());
    }
  } catch (const tk::Error& e) {
    tk::log::error("{}", e.what());
    return 1;
  } catch (const std::exception& e) {
    tk::log::error("internal error: {}", e.what());
    return 2;
  }
  return 0;
}
