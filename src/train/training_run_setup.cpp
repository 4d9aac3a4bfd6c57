// A training run's set-up, everything before its first step: the configuration resolved, the backend and the
// recipe, the data and its vocabulary, the model and optimizer, a resume, and what the run prints and records
// about itself (its plan, its memory table, config.toml).
#include "plan/flag_values.h"
#include "train/training_run.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "core/checked.h"
#include "core/error.h"
#include "core/format.h"
#include "core/log.h"
#include "io/hf.h"
#include "ops/device_info.h"
#include "plan/machine_fit.h"
#include "plan/zero_plan.h"
#include "train/config_file.h"
#include "train/evaluate.h"
#include "train/run_agreement.h"

namespace tk {

namespace {

// Flags whose change makes a resumed run differ from the one it continues.
const char* const kRecipeKeys[] = {"model", "data", "batch", "seq", "batch_tokens", "doc_mask", "vocab_size", "steps",
                                   "lr", "min_lr_ratio", "warmup", "schedule", "decay_fraction", "beta1",
                                   "beta2", "adam_eps", "weight_decay", "grad_clip", "seed", "moments"};

std::string absolute_if_exists(const std::string& p) {
  return !p.empty() && stdfs::exists(p) ? stdfs::absolute(p).lexically_normal().string() : p;
}

// A vocabulary padded to this multiple: the FP8 LM head needs multiples of 16, and rows in multiples of 64 keep the
// LM head's GEMMs on whole tensor-core tiles (128 would change no tile count that matters: the tail is one partial
// tile of hundreds, and it costs up to 64 more rows).
constexpr int64_t kVocabMultiple = 64;

int64_t padded_vocab(int64_t tokens) { return (tokens + kVocabMultiple - 1) / kVocabMultiple * kVocabMultiple; }

}  // namespace

void TrainingRun::resolve_config() {
  TK_CHECK(!cfg_.data.empty(), "no dataset given: pass --data DIR (a directory written by `tokamak prepare`)");
  check_train_config(cfg_);
  // Paths are stored absolute so that a resume from another working directory finds the same files.
  cfg_.data = absolute_if_exists(cfg_.data);
  if (!is_preset_name(cfg_.model)) cfg_.model = absolute_if_exists(cfg_.model);
  cfg_.tokenizer = absolute_if_exists(cfg_.tokenizer);

  tk::accumulation_steps(cfg_, world());  // the ranks can share the global batch (checked before anything is written)
  checked_mul(cfg_.steps, global_batch_tokens(cfg_, world()), "the run's tokens (--steps x --batch-tokens)");

  // A warm-up as long as the run leaves no step to decay: said, not left to be found in the curve.
  if (cfg_.warmup >= cfg_.steps && cfg_.steps > 0) {
    if (cfg_.steps > 1)
      log::warn("--warmup {} is {} the run's {} steps: the learning rate rises to its peak at the last step and never "
                "decays (--schedule {}); a --warmup below --steps, e.g. --warmup {}, leaves steps to decay",
                cfg_.warmup, cfg_.warmup > cfg_.steps ? "longer than" : "as long as", cfg_.steps, cfg_.schedule,
                std::max<int64_t>(1, cfg_.steps / 10));
    cfg_.warmup = cfg_.steps;
  }
  schedule_.peak_lr = cfg_.lr;
  schedule_.warmup_steps = cfg_.warmup;
  schedule_.total_steps = cfg_.steps;
  schedule_.decay = parse_lr_decay(cfg_.schedule);
  schedule_.min_lr_ratio = cfg_.min_lr_ratio;
  schedule_.decay_fraction = cfg_.decay_fraction;
  schedule_.validate();

  if (cfg_.out.empty() && cfg_.resume && !cfg_.resume_from.empty()) {
    stdfs::path ckpt = resolve_checkpoint(cfg_.resume_from);
    cfg_.out = ckpt.parent_path().string();
  }
  TK_CHECK(!cfg_.out.empty(), "no run directory given: pass --out RUN_DIR");
}

std::string TrainingRun::resume_source() const { return cfg_.resume_from.empty() ? dir_->path() : cfg_.resume_from; }

void TrainingRun::require_resume_source() const {
  TK_CHECK(stdfs::exists(resume_source()),
           "cannot resume: {} does not exist, so there is no checkpoint to continue from", resume_source());
}

std::string TrainingRun::find_resume_checkpoint() const { return resolve_checkpoint(resume_source()); }

// A model trained from scratch (a preset or a bare config.json) takes the vocabulary of its data's tokenizer,
// padded, unless --vocab-size names one; a model with weights keeps its own. The choice is recorded as the run's
// --vocab-size, so that repeating the run builds the same model; a run resumed without one takes its checkpoint's.
void TrainingRun::choose_vocab() {
  const bool from_scratch = source_.weights_path.empty() && source_.checkpoint_dir.empty();
  if (cfg_.vocab_size == 0 && !from_scratch) return;
  if (cfg_.vocab_size == 0 && cfg_.resume) {
    cfg_.vocab_size = find_model_source(find_resume_checkpoint()).config.vocab_size;
  } else if (cfg_.vocab_size == 0) {
    const int64_t own = source_.config.vocab_size, padded = padded_vocab(meta_.vocab_size);
    TK_CHECK(padded <= std::numeric_limits<int>::max(), "the data's vocabulary ({}) is too large", meta_.vocab_size);
    cfg_.vocab_size = int(padded);
    if (padded != own)
      fmt::print("vocabulary {} from the data's tokenizer ({} tokens{}; {}/meta.json) instead of {}'s {}; "
                 "--vocab-size N sets another\n",
                 padded, meta_.vocab_size,
                 padded == meta_.vocab_size ? "" : fmt::format(", padded to a multiple of {}", kVocabMultiple),
                 cfg_.data, cfg_.model, own);
  }
  resize_vocab();
}

// The vocabulary of a model trained from scratch set to cfg_.vocab_size (for example that of a tokenizer made by
// `tokamak train-tokenizer`); its end-of-text id becomes the data's document separator.
void TrainingRun::resize_vocab() {
  TK_CHECK(source_.weights_path.empty() && source_.checkpoint_dir.empty(),
           "--vocab-size applies to a model trained from scratch (a preset or a config.json), but {} has weights; "
           "its vocabulary is {}", cfg_.model, source_.config.vocab_size);
  TK_CHECK(cfg_.vocab_size >= meta_.vocab_size, "--vocab-size {} is smaller than the vocabulary of the data in {} ({})",
           cfg_.vocab_size, cfg_.data, meta_.vocab_size);
  ModelConfig& c = source_.config;
  c.vocab_size = cfg_.vocab_size;
  const int eot = meta_.eot_id >= 0 && meta_.eot_id < cfg_.vocab_size ? int(meta_.eot_id) : -1;
  if (c.bos_id >= c.vocab_size) c.bos_id = eot;
  if (c.eos_id >= c.vocab_size) c.eos_id = eot;
}

void TrainingRun::open_data() {
  meta_ = read_dataset_meta(cfg_.data);
  LoaderOptions o;
  o.data_dir = cfg_.data;
  o.B = recipe_.batch;
  o.T = recipe_.seq;
  o.seed = cfg_.seed;
  o.doc_mask = recipe_.doc_mask;
  // Batches in the backend's host memory (page-locked on CUDA): the model uploads them from there.
  Ops& ops = *backend_.ops;
  o.allocate = [&ops](size_t bytes) { return ops.allocate_host(bytes, "batches (host)"); };
  o.release = [&ops](void* p) { ops.release_host(p); };
  o.split = "train";
  o.rank = comm_ ? comm_->rank() : 0;
  o.world = world();
  train_data_ = DataLoader::open(o);
  if (hooks_.wrap_loader) train_data_ = hooks_.wrap_loader(std::move(train_data_));
  if (cfg_.eval_tokens > 0) {
    if (meta_.val_shards.empty()) {
      log::warn("{} has no validation split: validation is skipped", cfg_.data);
      return;
    }
    // Every rank validates the same windows (the model is whole on each): they stay in step.
    o.split = "val";
    o.shuffle = false;
    o.rank = 0;
    o.world = 1;
    try {
      val_data_ = DataLoader::open(o);
    } catch (const Error& e) {
      fail("{} (validation reads the val split; --eval-tokens 0 trains without validation)", e.what());
    }
    val_start_ = val_data_->state();
    // The same first windows every time, never more than the split holds.
    val_batches_ =
        std::min(std::max<int64_t>(1, cfg_.eval_tokens / recipe_.micro_tokens()), val_data_->batches_per_epoch());
  }
}

// The data must fit the model's vocabulary and, where the model's tokenizer is known, come from it.
// --tokenizer names it when the model source does not (a preset or a bare config.json).
void TrainingRun::check_tokenizer() {
  tokenizer_path_ = !source_.tokenizer_path.empty() ? source_.tokenizer_path : cfg_.tokenizer;
  check_dataset_fits_model(cfg_.data, meta_, source_.config, tokenizer_path_);
  if (tokenizer_path_.empty()) tokenizer_path_ = meta_.tokenizer_path;
}

void TrainingRun::build_model() {
  TK_CHECK(recipe_.seq <= source_.config.max_seq || source_.config.max_seq <= 0,
           "--seq {} is longer than the model's max_position_embeddings {}", recipe_.seq, source_.config.max_seq);
  model_ = make_model(recipe_, *backend_.ops);
  model_->init_params(cfg_.seed);
  if (comm_) dp_ = std::make_unique<DataParallel>(*comm_, *model_, recipe_.zero_stage);
  optimizer_ = dp_ && recipe_.zero_stage > 0
                   ? std::make_unique<AdamW>(*model_, recipe_.adamw_options(), dp_->owned(), dp_->sum_across_ranks())
                   : std::make_unique<AdamW>(*model_, recipe_.adamw_options());
  if (dp_) optimizer_->set_before_end_step([this] { dp_->agree_fp8_amax(); });
  if (!source_.weights_path.empty()) {
    log::info("loading weights from {}", source_.weights_path);
    optimizer_->set_weights_f32(load_params(model_->config(), model_->layout(), source_.weights_path));
  }
  throughput_.emplace(model_->config(), recipe_.seq, describe_device(backend_.gpu, cfg_.peak_tflops * 1e12),
                      recipe_.recompute.flops_per_token(model_->config(), recipe_.seq), world());
}

void TrainingRun::warn_recipe_changes(const json& saved) const {
  const json now = record().to_json();
  for (const char* key : kRecipeKeys)
    if (saved.contains(key) && saved[key] != now[key])
      log::warn("resuming with {} = {} where the checkpoint was trained with {}: the run will not continue bitwise",
                key, now[key].dump(), saved[key].dump());
}

void TrainingRun::resume_from(const std::string& checkpoint) {
  log::info("resuming from {}", checkpoint);
  state_ = load_checkpoint(checkpoint, *model_, *optimizer_);
  if (leader()) dir_->drop_checkpoints_after(state_.step, cfg_.overwrite);
  TK_CHECK(state_.tokenizer_fingerprint == train_data_->tokenizer_fingerprint(),
           "{} was trained on data of another tokenizer (fingerprint {:016x}) than {} ({:016x})", checkpoint,
           state_.tokenizer_fingerprint, cfg_.data, train_data_->tokenizer_fingerprint());
  warn_recipe_changes(state_.train_config);
  train_data_->restore(state_.loader);
  saved_step_ = state_.step;
  result_.checkpoint = checkpoint;
  if (leader()) truncate_run_log(dir_->log_path(), state_.step);
}

void TrainingRun::print_plan() const {
  const ModelConfig& c = model_->config();
  const ParamLayout& layout = model_->layout();
  const Ops& ops = *backend_.ops;
  const double params = double(model_->params().nbytes());  // ZeRO 3: this rank's slices
  const double host_grads = double(model_->grads().nbytes());  // offloaded: the whole gradients or this rank's slices
  // ZeRO 2, 3: this rank's slices and the staging. Offloaded gradients are not on the device: they count in the
  // offload line below, not in the total.
  const double device_grads = model_->grads_on_host() ? 0.0 : double(model_->gradient_bytes());
  const double opt = double(optimizer_->state_bytes());
  const double acts = double(model_->activation_bytes());
  fmt::print("model {} ({}): {} parameters, {} layers, d_model {}, {} heads ({} kv) x {}, ffn {}, vocab {}\n", c.name,
             arch_name(c.arch), format_count(double(layout.total)), c.n_layers, c.d_model, c.n_heads, c.n_kv_heads,
             c.head_dim, c.ffn_dim, c.vocab_size);
  fmt::print("batch: {} x {} tokens per micro-batch, {} micro-batch(es) per step{} = {} tokens per step; {} steps = {} tokens\n",
             recipe_.batch, recipe_.seq, recipe_.accumulation, comm_ ? fmt::format(" on each of {} ranks", world()) : "",
             tokens_per_step(), cfg_.steps, format_count(double(tokens_per_step()) * double(cfg_.steps)));
  const int zero = recipe_.zero_stage;
  if (comm_)
    fmt::print("data parallel: {} ranks over {}, ZeRO {} ({}); the memory below is each rank's\n", world(),
               comm_->name(), zero,
               zero == 0   ? "gradients all-reduced, optimizer state whole on every rank"
               : zero == 1 ? "gradients all-reduced, optimizer state sharded"
               : zero == 2 ? "gradients reduce-scattered, optimizer state sharded"
                           : "gradients reduce-scattered, optimizer state and parameters sharded");
  fmt::print("backend {} on {}{}; {:.3g} GFLOP per token; {}\n", ops.name(), throughput_->device().name,
             recipe_.backend.precision.fp8 ? " (linear layers' GEMMs in FP8; MFU against the bf16 peak)" : "",
             throughput_->model_flops_per_token() / 1e9, throughput_->peak_description());
  const std::string device_grads_text =
      fmt::format("{} ({}{})", format_bytes(device_grads), dtype_name(ops.grad_dtype()),
                  model_->grads_reduced() ? ": this rank's slices and the staging" : "");
  fmt::print("memory plan: parameters {} ({}), gradients {}, optimizer {} ({} m, v{}), activations {}; total {}\n",
             format_bytes(params), dtype_name(ops.act_dtype()),
             model_->grads_on_host() ? std::string("in host memory") : device_grads_text,
             format_bytes(opt), moments_name(optimizer_->moments()),
             optimizer_->has_master_weights() ? ", fp32 master weights" : "", format_bytes(acts),
             format_bytes(params + device_grads + opt + acts));
  if (optimizer_->offloaded())
    fmt::print("offload: {} of optimizer state in host memory; the optimizer figure above is its device staging\n",
               format_bytes(double(optimizer_->host_state_bytes())));
  if (model_->grads_on_host())
    fmt::print("offload: the {} of {} are in host memory; the device stages one group at a time (the memory "
               "table after step 1 has the sizes)\n",
               format_bytes(host_grads), model_->grads_reduced() ? "this rank's slices of the gradients" : "gradients");
  if (model_->options().recompute.any())
    fmt::print("recompute: {} (HFU counts {:.3g} GFLOP per token more than MFU)\n",
               model_->options().recompute.describe(),
               (throughput_->hardware_flops_per_token() - throughput_->model_flops_per_token()) / 1e9);
  std::fflush(stdout);
}

// After the first step every buffer exists (the fixed ones from the start, the scratch sized by the
// first step's shapes): the memory plan is printed as a table, written to memory.json, and sealed, so
// that a later allocation is reported as one the plan missed.
void TrainingRun::report_memory() const {
  Ops& ops = *backend_.ops;
  const std::vector<MemoryRow> rows = ops.memory_rows();
  size_t total = 0;
  for (const MemoryRow& r : rows) total += r.bytes;
  nlohmann::ordered_json j;
  j["device"] = throughput_->device().name;
  j["total_bytes"] = total;
  j["capacity_bytes"] = throughput_->device().memory_bytes;
  j["rows"] = nlohmann::ordered_json::array();
  fmt::print("memory held by tokamak after the first step (nothing is allocated after it):\n");
  for (const MemoryRow& r : rows) {
    fmt::print("  {:>10}  {:>5.1f}%  {}{}\n", format_bytes(double(r.bytes)), 100.0 * double(r.bytes) / double(total),
               r.label, r.count > 1 ? fmt::format(" (x{})", r.count) : "");
    j["rows"].push_back({{"component", r.label}, {"bytes", r.bytes}, {"count", r.count}});
  }
  fmt::print("  {:>10}  total on {}\n", format_bytes(double(total)), throughput_->device().name);
  if (const std::string tuning = gemm_tuning_summary(ops); !tuning.empty()) fmt::print("{}\n", tuning);
  std::fflush(stdout);
  if (leader()) dir_->write_memory_table(j);
  ops.seal_memory();
}

void TrainingRun::write_run_config() const {
  nlohmann::ordered_json j;
  j["train"] = record().to_json();
  j["model"] = model_->config().to_hf_json();
  j["model_name"] = model_->config().name;
  j["parameters"] = model_->layout().total;
  j["accumulation_steps"] = recipe_.accumulation;  // each rank's
  j["world_size"] = world();
  j["backend"] = backend_.ops->name();
  j["device"] = throughput_->device().name;
  j["peak_flops"] = throughput_->device().peak_flops;
  j["flops_per_token"] = throughput_->model_flops_per_token();
  j["tokenizer"] = tokenizer_path_;
  j["unigram_entropy_nats"] = unigram_nats_;
  j["memory"] = {{"activation_bytes", model_->activation_bytes()},
                 {"optimizer_bytes", optimizer_->state_bytes()},
                 {"gradient_bytes", model_->gradient_bytes()},
                 {"parameter_bytes", model_->params().nbytes()}};
  dir_->write_config(j);
  json recorded = record().to_json();
  recorded["out"] = stdfs::absolute(dir_->path()).lexically_normal().string();
  dir_->write_config_file(config_file_text(
      recorded, "The configuration of this run as tokamak train resolved it (defaults, config file and flags).\n"
                "Repeat the run with: tokamak train --config THIS_FILE --out NEW_DIR"));
}

// Everything before the first step: every check that can fail runs before an old run's files go.
void TrainingRun::set_up() {
  started_ = Clock::now();
  resolve_config();
  dir_.emplace(cfg_.out);
  if (cfg_.resume) require_resume_source();
  // Before anything in the directory is read or written: a second writer is refused here, at once. Rank 0 of a
  // data-parallel run owns the directory; the other ranks write only their shards of each checkpoint.
  if (leader()) lock_.emplace(dir_->path());
  const std::string resume_checkpoint = cfg_.resume ? find_resume_checkpoint() : "";
  // Resuming into another directory (--out elsewhere) starts a new run directory there.
  std::error_code ec;
  const bool in_place =
      cfg_.resume && stdfs::equivalent(stdfs::path(resume_checkpoint).parent_path(), dir_->path(), ec);
  if (leader() && !in_place) dir_->check_free(cfg_.overwrite);
  if (leader()) dir_->remove_interrupted_work();
  result_.run_dir = dir_->path();

  build_parts();
  if (leader() && !in_place) dir_->clear();
  state_.rng = {{"init_seed", cfg_.seed}, {"data_seed", cfg_.seed}};
  state_.tokenizer_path = tokenizer_path_;
  state_.tokenizer_fingerprint = train_data_->tokenizer_fingerprint();
  if (cfg_.resume) resume_from(resume_checkpoint);
  // The run directory's own copy of the tokenizer, which its checkpoints name (run_dir.h).
  if (leader() && !tokenizer_path_.empty()) state_.tokenizer_path = dir_->keep_tokenizer(tokenizer_path_);

  print_plan();
  if (!leader()) return;
  UnigramEntropy ue = unigram_entropy(meta_.train_shards, train_data_->vocab_size(), 100'000'000);
  unigram_nats_ = ue.nats;
  fmt::print("unigram entropy of the training split: {:.4f} nats{}\n", ue.nats,
             ue.whole_split ? "" : fmt::format(" (over its first {} tokens)", format_count(double(ue.tokens))));
  write_run_config();
  log_ = std::make_unique<RunLog>(dir_->log_path(), tensorboard_dir(cfg_.tensorboard, dir_->path()));
}

// The backend (wrapped when a hook asks), the recipe, the data, the model and its optimizer.
void TrainingRun::build_parts() {
  backend_ = make_backend(cfg_.device);
  source_ = find_model_source(cfg_.model);
  meta_ = read_dataset_meta(cfg_.data);
  if (comm_)
    dist::require_agreement(*comm_, run_inputs_fingerprint(cfg_, source_, meta_.tokenizer_fingerprint,
                                                           cfg_.resume ? find_resume_checkpoint() : ""));
  choose_vocab();
  recipe_ = train_recipe(cfg_, source_.config, backend_.gpu, world());
  recipe_.rank = comm_ ? comm_->rank() : 0;
  recipe_.data_parallel = comm_ != nullptr;
  if (!comm_) recipe_.zero_stage = 0;  // one process: nothing to shard
  if (!recipe_.precision_note.empty()) fmt::print("{}\n", recipe_.precision_note);
  if (!cfg_.memory_budget.empty()) apply_memory_budget();  // before the loader: it sets the micro-batch
  if (comm_) refuse_what_data_parallelism_lacks();
  if (recipe_.backend.precision.fp8_lm_head() && !recipe_.lm_head_fp8_shapes()) {
    const ModelConfig& c = source_.config;
    log::warn("--fp8-lm-head: the LM head stays bf16: its FP8 GEMMs need the vocabulary ({}), d_model ({}) and the "
              "tokens of a micro-batch ({}) multiples of 16{}",
              c.vocab_size, c.d_model, recipe_.micro_tokens(),
              c.vocab_size % 16 != 0 && source_.weights_path.empty() && source_.checkpoint_dir.empty()
                  ? fmt::format(" (--vocab-size {} pads the vocabulary)", padded_vocab(c.vocab_size))
                  : "");
  }
  // The backend's settings, then the wrap: they need the backend itself.
  configure_backend(*backend_.ops, recipe_.backend);
  if (hooks_.wrap_ops) backend_.ops = hooks_.wrap_ops(std::move(backend_.ops));
  refuse_a_model_larger_than_the_machine();
  open_data();
  check_tokenizer();
  build_model();
}

// The combinations the data-parallel steps do not implement, refused before anything is allocated (a plan that
// --memory-budget chose never is one).
void TrainingRun::refuse_what_data_parallelism_lacks() const {
  TK_CHECK(!recipe_.offload_gradients || recipe_.gradient_offload_allowed(),
           "--offload optimizer,gradients on data-parallel ranks keeps each rank's slice of the gradients in host "
           "memory, and ZeRO {} has none (every rank reduces all of them on the device): add --zero 2 or 3, or use "
           "--offload optimizer",
           recipe_.zero_stage);
}

// --memory-budget: the fastest micro-batch (at most --batch) and recompute policy whose planned memory
// fits, for the same global batch (accumulation makes up the difference); on many ranks each rank's memory, and the
// ZeRO stage too unless --zero was given.
void TrainingRun::apply_memory_budget() {
  std::string line;
  const Recipe base = recipe_;
  recipe_ = fit_memory_budget(base, cfg_, running_plan_target(backend_, cfg_.peak_tflops), line).recipe;
  // The run's own settings of the recipe stay as they were.
  recipe_.rank = base.rank;
  recipe_.data_parallel = base.data_parallel;
  if (comm_) require_the_same_choice();
  fmt::print("{}\n", line);
}

// The run's configuration as it is recorded (config.toml, config.json, each checkpoint): the flags, with the global
// batch and the ZeRO stage as the run resolved them, and with --memory-budget the setting it chose, so that the record
// repeats the run.
TrainConfig TrainingRun::record() const {
  TrainConfig c = cfg_;
  c.batch_tokens = tokens_per_step();
  c.zero = std::max(cfg_.zero, 0);
  if (!cfg_.memory_budget.empty()) {
    c.zero = recipe_.zero_stage;
    c.logits_chunk_mib = int(recipe_.logits_chunk_bytes() >> 20);
    c.batch = recipe_.batch;
    c.recompute = recipe_.recompute.describe();
    c.offload = recipe_.offload_name();
  }
  return c;
}

// Every rank must run the plan rank 0 runs. They search alike from the same flags (the start-up's fingerprint), but
// the inputs also hold this machine's GPU (its rates, its SM count) and host memory (offload's limit), which ranks on
// other hosts may not share.
void TrainingRun::require_the_same_choice() const {
  struct Choice {
    int stage, batch, accumulation, offload, offload_gradients;
    uint64_t logits_chunk;
    char recompute[64];
  };
  Choice mine{recipe_.zero_stage, recipe_.batch, recipe_.accumulation, recipe_.optimizer.offload ? 1 : 0,
              recipe_.offload_gradients ? 1 : 0, uint64_t(recipe_.logits_chunk_bytes()), {}};
  const std::string recompute = recipe_.recompute.describe();
  std::snprintf(mine.recompute, sizeof mine.recompute, "%s", recompute.c_str());
  std::vector<Choice> all(static_cast<size_t>(world()));
  comm_->host_all_gather(&mine, all.data(), sizeof(Choice));
  auto same = [](const Choice& a, const Choice& b) {
    return a.stage == b.stage && a.batch == b.batch && a.accumulation == b.accumulation && a.offload == b.offload &&
           a.offload_gradients == b.offload_gradients && a.logits_chunk == b.logits_chunk &&
           std::strcmp(a.recompute, b.recompute) == 0;
  };
  for (int r = 1; r < world(); r++)
    TK_CHECK(same(all[0], all[size_t(r)]),
             "--memory-budget: rank {} chose ZeRO {}, micro-batch {}, recompute {} where rank 0 chose ZeRO {}, "
             "micro-batch {}, recompute {}: their GPUs or host memory differ; set --zero, --batch, --recompute and "
             "--offload yourself (tokamak plan --gpus N shows each stage's memory)",
             r, all[size_t(r)].stage, all[size_t(r)].batch, all[size_t(r)].recompute, all[0].stage, all[0].batch,
             all[0].recompute);
}

// The run as planned (after --memory-budget's choices, with its offload) against the machine, before the model
// or the loader allocate anything.
void TrainingRun::refuse_a_model_larger_than_the_machine() const {
  refuse_plan_larger_than(source_.config, plan_memory(recipe_, running_plan_target(backend_, cfg_.peak_tflops)),
                          machine_memory(backend_.gpu));
}

void TrainingRun::set_up_steps() {
  started_ = Clock::now();
  TK_CHECK(!cfg_.resume, "only `tokamak train` resumes a run; to start from a checkpoint's weights, pass it as --model");
  cfg_.eval_tokens = 0;  // steps only: the validation split is not opened
  resolve_config();
  build_parts();
}

}  // namespace tk
