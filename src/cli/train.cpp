// `tokamak train`: every TrainConfig field as a flag, and as a key of a config file (--config FILE, TOML):
// the file's values over the defaults, the flags given on the command line over the file. With --resume, the
// checkpoint's saved config is the starting point and only the file and the flags given change it, so
// `tokamak train --resume RUN_DIR` alone continues a run exactly.
#include <algorithm>
#include <filesystem>
#include <limits>
#include <memory>

#include <fmt/format.h>

#include "cli/command.h"
#include "cli/conventions.h"
#include "cli/step_options.h"
#include "core/error.h"
#include "train/checkpoint.h"
#include "train/config_file.h"
#include "train/trainer.h"

namespace {

using tk::TrainConfig;
using json = nlohmann::json;
namespace stdfs = std::filesystem;

struct TrainArgs {
  TrainConfig config;
  std::string resume, config_file;
};

// The flags that say where a run goes and how it starts, not what it is: the command line's alone.
const char* const kNotInConfigFiles[] = {"config", "resume", "overwrite", "gpus", "help"};

void add_options(CLI::App& app, TrainArgs& a) {
  tk::cli::add_step_options(app, a.config);
  tk::cli::add_run_options(app, a.config);
  const std::string run = "Run directory";
  app.add_option("--out", a.config.out, "Run directory (default: runs/<model>)")->group(run);
  app.add_option("--config", a.config_file,
                 "A TOML file of train flags (keys: the flags' names, e.g. batch-tokens = 65536); flags given on the "
                 "command line override it. A run's config.toml repeats that run (docs/config.md)")
      ->group(run);
  app.add_option("--resume", a.resume, "Continue a run: its directory or a checkpoint (default: the --out directory)")
      ->expected(0, 1)
      ->group(run);
  app.add_flag("--overwrite", a.config.overwrite,
               "Replace the run already in --out (with --resume: delete the checkpoints after the one resumed from)")
      ->group(run);
}

std::string default_run_dir(const std::string& model) {
  std::string name = stdfs::path(model).filename().string();
  if (name.empty()) name = stdfs::path(model).parent_path().filename().string();
  return (stdfs::path("runs") / name).string();
}

// What a config value must be, from the type of the flag it sets.
void check_type(const CLI::Option& opt, const tk::ConfigEntry& e, const std::string& where) {
  const std::string type = tk::cli::is_flag(opt) ? "BOOL" : opt.get_type_name();
  const json& v = e.value;
  const bool integer = v.is_number_integer(), ok = type == "BOOL"                    ? v.is_boolean()
                                                  : type.rfind("INT", 0) == 0 ||
                                                            type.rfind("UINT", 0) == 0 ? integer
                                                  : type.rfind("FLOAT", 0) == 0        ? v.is_number()
                                                                                       : v.is_string();
  if (ok) return;
  const char* wanted = type == "BOOL"                                                    ? "true or false"
                       : type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0          ? "an integer"
                       : type.rfind("FLOAT", 0) == 0                                      ? "a number"
                                                                                          : "a string (in quotes)";
  tk::cli::usage_error("{}: `{}` must be {}, like its flag --{}; the file gives {}", where, e.key, wanted, e.key,
                       v.dump());
}

// The value as it would be typed after the flag, for the flag's own checks.
std::string as_typed(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) return fmt::format("{}", v.get<double>());
  return v.dump();
}

// The checks CLI11 runs on the option's values (it tells their number only by throwing past the last).
std::vector<CLI::Validator*> checks_of(CLI::Option& opt) {
  std::vector<CLI::Validator*> checks;
  try {
    for (int i = 0;; i++) checks.push_back(opt.get_validator(i));
  } catch (const CLI::OptionNotFound&) {
  }
  return checks;
}

// The file's values as TrainConfig JSON keys, each checked as its flag is: the key names a flag of `tokamak
// train`, the value has the flag's type and passes the flag's checks. Every mistake names the file and line.
json config_file_values(CLI::App& app, const std::string& path) {
  tk::ConfigFile file;
  try {
    file = tk::read_config_file(path);
  } catch (const tk::Error& e) {
    tk::cli::usage_error("{}", e.what());
  }
  json values = json::object();
  for (const tk::ConfigEntry& e : file.entries) {
    const std::string where = fmt::format("{}:{}", path, e.line);
    for (const char* own : kNotInConfigFiles)
      if (e.key == own)
        tk::cli::usage_error("{}: `{}` cannot be set in a config file: it says where a run goes or how it starts, not "
                             "what it is; pass --{} on the command line",
                             where, e.key, e.key);
    CLI::Option* opt = e.key.empty() || e.key[0] == '-' ? nullptr : app.get_option_no_throw("--" + e.key);
    if (!opt) {
      std::string dashed = e.key;
      std::replace(dashed.begin(), dashed.end(), '_', '-');
      tk::cli::usage_error("{}: unknown key `{}`: `tokamak train` has no --{}{}", where, e.key, e.key,
                           dashed != e.key && app.get_option_no_throw("--" + dashed)
                               ? fmt::format(" (the keys are the flags' names: `{}`)", dashed)
                               : " (`tokamak train --help` lists the flags; the keys are their names)");
    }
    check_type(*opt, e, where);
    for (CLI::Validator* check : checks_of(*opt)) {
      std::string typed = as_typed(e.value);
      if (const std::string error = (*check)(typed); !error.empty())
        tk::cli::usage_error("{}: {} = {}: {}", where, e.key, e.value.dump(), error);
    }
    // The value must fit the flag's own type (an int flag cannot hold 4294967298).
    const std::string key = tk::config_key_of_flag(e.key);
    json one = TrainConfig().to_json();
    one[key] = e.value;
    try {
      TrainConfig::from_json(one);
    } catch (const tk::Error& error) {
      tk::cli::usage_error("{}: {}", where, error.what());
    }
    values[key] = e.value;
  }
  return values;
}

// `base` (the defaults, or the saved config of the run resumed), the config file's values over it, and the flags
// given on this command line over both.
TrainConfig merged_config(const CLI::App& app, json base, const json& file_values, const TrainConfig& given) {
  for (const auto& [key, value] : file_values.items()) base[key] = value;
  const json cli = given.to_json();
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->count() == 0 || opt->get_lnames().empty()) continue;
    const std::string key = tk::config_key_of_flag(opt->get_lnames().front());
    if (cli.contains(key)) base[key] = cli[key];
  }
  return TrainConfig::from_json(base);
}

// A run's own config.toml, given back with neither --out nor --overwrite, would replace that run: refused,
// saying how to repeat it instead.
void refuse_replacing_the_recorded_run(const std::string& config_file, const TrainConfig& c) {
  if (config_file.empty() || c.overwrite) return;
  std::error_code ec;
  const stdfs::path recorded = stdfs::path(config_file).parent_path();
  if (!stdfs::equivalent(recorded.empty() ? "." : recorded, c.out, ec)) return;
  if (!stdfs::exists(stdfs::path(c.out) / "config.json") && !stdfs::exists(stdfs::path(c.out) / "log.jsonl")) return;
  tk::cli::usage_error("{} is the configuration of the run in {}: to repeat that run, pass --out NEW_DIR (or "
                       "--overwrite to replace it; --resume continues it)",
                       config_file, c.out);
}

tk::cli::Command train_cmd("train", "Train a model on prepared data", [](CLI::App& app) -> tk::cli::Runner {
  auto args = std::make_shared<TrainArgs>();
  add_options(app, *args);
  return [&app, args] {
    const json file_values = args->config_file.empty() ? json::object() : config_file_values(app, args->config_file);
    TrainConfig c;
    if (app.get_option("--resume")->count() > 0) {
      const std::string where = !args->resume.empty() ? args->resume : args->config.out;
      if (where.empty()) tk::cli::usage_error("--resume needs to know which run: --resume RUN_DIR or --out RUN_DIR");
      const json saved = tk::read_trainer_state(tk::resolve_checkpoint(where)).train_config;
      c = merged_config(app, saved, file_values, args->config);
      c.resume = true;
      c.resume_from = args->resume;
      // --out, else the file's out, else "": the directory of the checkpoint resumed from.
      c.out = app.get_option("--out")->count() > 0 ? args->config.out : file_values.value("out", std::string());
    } else {
      c = merged_config(app, TrainConfig().to_json(), file_values, args->config);
      if (c.data.empty())
        tk::cli::usage_error("no dataset given: pass --data DIR (a directory written by `tokamak prepare`), or set "
                             "data in the --config file");
      if (c.out.empty()) c.out = default_run_dir(c.model);
      c.overwrite = args->config.overwrite;
      refuse_replacing_the_recorded_run(args->config_file, c);
    }
    c.overwrite = args->config.overwrite;
    tk::cli::require_valid(c);
    tk::Trainer trainer(c, tk::cli::communicator());
    return trainer.run().exit_code;
  };
});

}  // namespace
