// `tokamak profile`: train's flags for what a step computes and how (not the run's length, schedule, validation or
// checkpoints, which change no step's time), a few warm-up steps, then measured steps timed per op;
// prints where a step's time goes and what to change first, and writes profile.json and trace.json to
// --out (docs/profile.md). On many ranks (--gpus N, mpirun, srun) every rank runs the data-parallel steps and rank 0
// reports them with every rank's communication and data wait.
#include <fmt/format.h>

#include <memory>
#include <optional>

#include "cli/command.h"
#include "cli/step_options.h"
#include "dist/communicator.h"
#include "profile/profile_report.h"
#include "profile/profile_run.h"
#include "train/run_dir.h"

namespace {

struct ProfileArgs {
  tk::ProfileOptions profile;
  std::string out = "runs/profile";
  bool json = false;
};

int run(ProfileArgs f) {
  tk::cli::require_valid(f.profile.train);
  f.profile.train.out = f.out;
  f.profile.print_progress = !f.json;
  tk::dist::Communicator* comm = tk::cli::communicator();
  // --out is often a training run's directory: one writer at a time, and a second one refused before it measures. Of
  // many ranks rank 0 writes the profile, as it owns a training run's directory.
  std::optional<tk::RunDirLock> lock;
  if (comm == nullptr || comm->rank() == 0) lock.emplace(f.out);
  const std::optional<tk::ProfileReport> r = tk::run_profile(f.profile, comm);
  if (!r) return 0;  // another rank: its steps ran with rank 0's, which reports them all
  tk::write_profile(*r, f.out);
  if (f.json) {
    fmt::print("{}\n", tk::profile_json(*r).dump(2));
  } else {
    fmt::print("{}\nwrote {}/profile.json and {}/trace.json (open the trace in https://ui.perfetto.dev)\n",
               tk::format_profile(*r), f.out, f.out);
  }
  return 0;
}

tk::cli::Command profile_cmd("profile", "Where the time of a training step goes: per-op roofline, totals and advice",
                             [](CLI::App& app) -> tk::cli::Runner {
                               auto f = std::make_shared<ProfileArgs>();
                               tk::cli::add_step_options(app, f->profile.train);
                               app.add_option("--warmup-steps", f->profile.warmup_steps, "Steps run before measuring")
                                   ->capture_default_str();
                               app.add_option("--measure-steps", f->profile.measure_steps, "Steps measured")
                                   ->capture_default_str();
                               app.add_option("--out", f->out, "Directory for profile.json and trace.json")
                                   ->capture_default_str();
                               app.add_flag("--json", f->json, "Print profile.json on stdout instead of the table");
                               return [f] { return run(*f); };
                             });

}  // namespace
