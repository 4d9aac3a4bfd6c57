// tokamak's entry point: parses the subcommand, runs it, and turns any error into one clear line on stderr:
// a usage error (the command line, a config file) exits 2, a command that ran and failed exits 1.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cli/command.h"
#include "cli/conventions.h"
#include "core/edit_distance.h"
#include "core/error.h"
#include "core/log.h"
#include "dist/agreement.h"
#include "dist/communicator.h"
#include "dist/cpu_binding.h"
#include "dist/launch.h"
#include "dist/session.h"
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

// The commands that take --gpus: `--gpus N` starts N ranks on this host; mpirun and srun start them anywhere. `bench`
// takes it to refuse more than one (refuse_bench_on_ranks).
static bool runs_on_ranks(const std::string& command) {
  return command == "train" || command == "profile" || command == "bench";
}

// The commands whose steps are data-parallel on many ranks: their ranks connect, --gpus 1 included (one rank on NCCL).
static bool data_parallel(const std::string& command) { return command == "train" || command == "profile"; }

// `tokamak bench` times one process's steps on random tokens, with no data and no communication: many ranks are
// refused before any starts, with what measures them.
static void refuse_bench_on_ranks(const std::string& command, int ranks) {
  TK_CHECK(command != "bench" || ranks <= 1,
           "`tokamak bench` runs on one GPU (it times one process's steps on random tokens); for {} ranks, measure "
           "training with `tokamak train --gpus {}` (bench/scaling.sh runs it at each ZeRO stage beside PyTorch) or "
           "where its time goes with `tokamak profile --gpus {}`",
           ranks, ranks, ranks);
}

namespace tk::cli {

static std::unique_ptr<tk::dist::Communicator> connected;
tk::dist::Communicator* communicator() { return connected.get(); }

}  // namespace tk::cli

// The ranks of a run connect (NCCL on the GPU, MPI on the CPU) and check that they were given the same command before
// any work; the other ranks' warnings and stdout are dropped (mpirun and srun would print every rank's step lines: the launcher of
// --gpus drops it too).
static void connect_ranks(const tk::dist::Session& session, const CLI::App& command, int argc, char** argv) {
  const bool gpu = tk::backend_is_gpu(command.get_option("--device")->as<std::string>());
  tk::cli::connected = tk::dist::make_communicator(session, gpu);
  std::string args;
  for (int i = 1; i < argc; i++) args.append(argv[i]).push_back('\0');
  tk::dist::Fingerprint given;
  given.add("tokamak version", TOKAMAK_VERSION).add("command line", args);
  tk::dist::require_agreement(*tk::cli::connected, given);
  if (session.world().rank == 0) {
    // The ranks are bound alike; rank 0 says it for all.
    const std::string narrow = gpu ? "" : tk::dist::narrow_binding_warning_here(0);
    if (!narrow.empty()) tk::log::warn("{}", narrow);
    return;
  }
  tk::log::set_level(tk::log::Level::Error);  // rank 0 says what every rank would warn of
  if (session.world().launcher != tk::dist::Launcher::tokamak)
    TK_CHECK(std::freopen("/dev/null", "w", stdout) != nullptr, "rank {}: cannot drop its standard output: {}",
             session.world().rank, std::strerror(errno));
}

// CLI11 reads an unknown command as a missing one: name it, and the commands there are. The root takes only
// flags, so its first other argument is the command.
static void check_command_name(const CLI::App& app, int argc, char** argv) {
  for (int i = 1; i < argc; i++) {
    const std::string arg = argv[i];
    if (arg.empty() || arg[0] == '-') continue;
    std::string names;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      if (sub->get_name() == arg) return;
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    tk::cli::usage_error("unknown command '{}'; the commands are {}", arg, names);
  }
}

// The options of `command` a mistyped `--name` most likely means: the name with '-' for '_' and in lower case
// (--Steps: --steps), else the one nearest by edit distance when within 2 and alone there (--bacth: --batch), else the
// longest option the name begins with and the longest it ends with, word by word (--batch_size: --batch;
// --lr-warmup: --lr or --warmup); "" when none.
static std::string options_meant(const CLI::App& command, const std::string& name) {
  std::string dashed = name;
  std::replace(dashed.begin(), dashed.end(), '_', '-');
  std::transform(dashed.begin(), dashed.end(), dashed.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  const auto ends_with = [&](const std::string& tail) {
    return dashed.size() > tail.size() && dashed.compare(dashed.size() - tail.size(), tail.size(), tail) == 0;
  };
  std::string first, last, nearest;
  size_t best = 3;
  bool tie = false;
  for (const CLI::Option* opt : command.get_options()) {
    for (const std::string& known : opt->get_lnames()) {
      if (known == dashed) return "--" + known;
      if (dashed.rfind(known + "-", 0) == 0 && known.size() > first.size()) first = known;
      if (ends_with("-" + known) && known.size() > last.size()) last = known;
      const size_t d = tk::edit_distance(dashed, known);
      tie = d == best ? true : d < best ? false : tie;
      if (d < best) best = d, nearest = known;
    }
  }
  if (!nearest.empty() && !tie) return "--" + nearest;
  if (!first.empty() && !last.empty()) return "--" + first + " or --" + last;
  return first.empty() && last.empty() ? "" : "--" + first + last;
}

// The first `--name` on the command line after the command that is no option of it (or of tokamak itself), with the
// option it most likely means: what CLI11's "arguments were not expected" leaves to the reader.
static std::string suggest_option(const CLI::App& app, const CLI::App& command, int argc, char** argv) {
  bool after = false;
  for (int i = 1; i < argc; i++) {
    const std::string arg = argv[i];
    if (arg == command.get_name()) after = true;
    if (!after || arg.rfind("--", 0) != 0 || arg.size() < 3) continue;
    const std::string name = arg.substr(2, arg.find('=') - 2);
    if (command.get_option_no_throw("--" + name) || app.get_option_no_throw("--" + name)) continue;
    const std::string meant = options_meant(command, name);
    return meant.empty() ? "" : fmt::format("--{} is not an option of 'tokamak {}': did you mean {}? ", name,
                                            command.get_name(), meant);
  }
  return "";
}

// A parse error of CLI11 (an unknown option, a missing or invalid value) as tokamak reports usage errors.
static int report_parse_error(const CLI::App& app, const CLI::ParseError& e, int argc, char** argv) {
  const auto parsed = app.get_subcommands();
  const std::string command = parsed.empty() ? "tokamak" : "tokamak " + parsed.front()->get_name();
  std::string what = e.what();
  if (what == "A subcommand is required") what = "a command is required";
  // CLI11's sentences start with a capital; after "error: " ours do not.
  const auto letter = [&](size_t i) { return static_cast<unsigned char>(what[i]); };
  if (what.size() > 1 && std::isupper(letter(0)) && std::islower(letter(1))) what[0] = char(std::tolower(letter(0)));
  if (dynamic_cast<const CLI::ExtrasError*>(&e) && !parsed.empty()) {
    const std::string suggestion = suggest_option(app, *parsed.front(), argc, argv);
    if (!suggestion.empty()) what = suggestion + "(" + what + ")";
  }
  tk::log::error("{}\nRun '{} --help' for {}.", what, command, parsed.empty() ? "the commands" : "its options");
  return tk::cli::kUsageExit;
}

int main(int argc, char** argv) {
  restart_with_library_settings(argv);
  // Past a file size limit (ulimit -f) the kernel sends SIGXFSZ, which would end the process without a word:
  // ignored, the write fails with EFBIG instead, and is reported (with the file) like any other write error.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"tokamak: trains Llama-family language models at the speed the hardware allows, and says what bounds them"};
  app.set_version_flag("--version", std::string("tokamak ") + TOKAMAK_VERSION);
  app.require_subcommand(1);
  app.formatter(std::make_shared<tk::cli::HelpFormatter>());
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
          ->check(CLI::PositiveNumber)
          ->capture_default_str();
  }
  try {
    check_command_name(app, argc, argv);
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version arrive as "errors" whose exit code is success.
    if (e.get_exit_code() == int(CLI::ExitCodes::Success)) return app.exit(e);
    return report_parse_error(app, e, argc, argv);
  } catch (const tk::cli::UsageError& e) {
    tk::log::error("{}", e.what());
    return tk::cli::kUsageExit;
  }
  if (verbose) tk::log::set_level(tk::log::Level::Debug);
  try {
    for (auto& [sub, run] : runners) {
      if (!sub->parsed()) continue;
      const tk::dist::World launched = tk::dist::read_world();
      refuse_bench_on_ranks(sub->get_name(), std::max(gpus, launched.size));
      if (gpus > 1 && launched.launcher != tk::dist::Launcher::tokamak) {
        TK_CHECK(sub->get_option("--device")->as<std::string>() != "cpu",
                 "--gpus {} runs one process per GPU; for ranks on the CPU use mpirun -np {} tokamak ... --device cpu",
                 gpus, gpus);
        return tk::dist::launch_local_ranks(std::vector<std::string>(argv, argv + argc), gpus);
      }
      tk::dist::Session session(launched);
      // --gpus 1 takes the data-parallel path too, on NCCL with one rank.
      const bool gpus_given = runs_on_ranks(sub->get_name()) && sub->get_option("--gpus")->count() > 0;
      if ((session.world().size > 1 || gpus_given) && data_parallel(sub->get_name()))
        connect_ranks(session, *sub, argc, argv);
      const int code = run();
      tk::cli::connected.reset();
      return session.finish(code);
    }
  } catch (const tk::cli::UsageError& e) {
    tk::log::error("{}", e.what());
    return tk::cli::kUsageExit;
  } catch (const tk::Error& e) {
    tk::log::error("{}", e.what());
    return tk::cli::kFailureExit;
  } catch (const std::exception& e) {
    tk::log::error("internal error: {}", e.what());
    return tk::cli::kFailureExit;
  }
  return 0;
}
