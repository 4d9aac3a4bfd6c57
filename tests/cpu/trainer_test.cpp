// The trainer on a tiny model and a tiny dataset made here (byte-level tokens): bitwise resume, the
// NaN stop that keeps the last checkpoint, run-directory refusal and clearing, the lock that refuses a
// second writer, complete and incomplete checkpoints (and those of versions before the marker), failures
// after a step that still save it, SIGHUP, the refusal of a model larger than the machine, the log's
// records and their truncation on resume, checkpoint pruning and validation,
// the LR schedules, gradient accumulation against a larger micro-batch, and bf16 and int8 AdamW moments
// (bitwise resume and offload, and training quality against f32 moments).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>

#include "core/error.h"
#include "core/fs.h"
#include "data/shard.h"
#include "data_testing.h"
#include "io/hf.h"
#include "model/config.h"
#include "model/model.h"
#include "model/params.h"
#include "model_testing.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/moment_codec.h"
#include "optim/lr_schedule.h"
#include "plan/flag_values.h"
#include "plan/machine_fit.h"
#include "plan/memory_plan.h"
#include "plan/metrics.h"
#include "run_testing.h"
#include "train/checkpoint.h"
#include "train/dataset.h"
#include "train/evaluate.h"
#include "train/model_source.h"
#include "train/run_dir.h"
#include "train/run_log.h"
#include "train/trainer.h"

namespace tk {
namespace {

namespace stdfs = std::filesystem;
using testing::error_of;
using testing::TempDir;

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  for (size_t at = 0, end; at < text.size(); at = end + 1) {
    end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    if (end > at) lines.push_back(text.substr(at, end - at));
  }
  return lines;
}

std::string write_config(const TempDir& dir, const ModelConfig& c, const std::string& name = "model.json") {
  return testing::write_model_config(dir, c, name);
}

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = testing::make_byte_dataset(dir_);
    model_ = write_config(dir_, testing::tiny_llama_config());
  }

  TrainConfig config(const std::string& run) const {
    TrainConfig c;
    c.model = model_;
    c.data = data_;
    c.out = dir_.path(run);
    c.device = "cpu";
    c.batch = 2;
    c.seq = 16;
    c.steps = 6;
    c.lr = 3e-3;
    c.warmup = 2;
    c.eval_tokens = 64;
    c.eval_every = 3;
    c.keep_checkpoints = 0;
    return c;
  }

  // Runs the trainer and returns each step's loss; `signal` is raised after step interrupt_at.
  static std::vector<double> train(const TrainConfig& c, int interrupt_at = -1, TrainResult* result = nullptr,
                                   int signal = SIGINT) {
    std::vector<double> losses;
    Trainer t(c);
    t.on_step = [&](const StepRecord& r) {
      losses.push_back(r.loss);
      if (r.step == interrupt_at) std::raise(signal);
    };
    TrainResult res = t.run();
    if (result) *result = res;
    return losses;
  }

  TempDir dir_;
  std::string data_, model_;
};

TEST(LrSchedule, WarmupThenEachDecayToTheFloor) {
  LrSchedule s;
  s.peak_lr = 1.0;
  s.warmup_steps = 10;
  s.total_steps = 110;
  s.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(s.at(1), 0.1);
  EXPECT_DOUBLE_EQ(s.at(5), 0.5);
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);
  EXPECT_DOUBLE_EQ(s.at(60), 0.55);  // cosine halfway: the middle of peak and floor
  EXPECT_NEAR(s.at(35), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.25)), 1e-12);
  EXPECT_DOUBLE_EQ(s.at(110), 0.1);
  EXPECT_DOUBLE_EQ(s.at(500), 0.1);

  s.decay = LrDecay::Linear;
  EXPECT_DOUBLE_EQ(s.at(35), 1.0 - 0.9 * 0.25);
  EXPECT_DOUBLE_EQ(s.at(110), 0.1);

  s.decay = LrDecay::WarmupStableDecay;
  s.decay_fraction = 0.2;  // decays over the last 22 steps: 88 -> 110
  EXPECT_DOUBLE_EQ(s.at(50), 1.0);
  EXPECT_DOUBLE_EQ(s.at(88), 1.0);
  EXPECT_DOUBLE_EQ(s.at(99), 1.0 - 0.9 * 0.5);
  EXPECT_DOUBLE_EQ(s.at(110), 0.1);
}

TEST(LrSchedule, RejectsBadSettings) {
  LrSchedule s;
  s.total_steps = 10;
  s.warmup_steps = 11;
  EXPECT_NE(error_of([&] { s.validate(); }).find("--warmup"), std::string::npos);
  EXPECT_NE(error_of([] { parse_lr_decay("exponential"); }).find("cosine, linear or wsd"), std::string::npos);
}

TEST(Metrics, DeviceTablesMatchWholeNames) {
  // The peak rate and, for Hopper (where tokamak's own attention backward runs; memory_plan.h), the SM count.
  struct Row {
    const char* name;
    double peak;
    int hopper_sms;
  };
  const Row rows[] = {{"NVIDIA H100 80GB HBM3", 989e12, 132}, {"NVIDIA H100 PCIe", 756e12, 114},
                      {"NVIDIA H200", 989e12, 132},           {"NVIDIA GH200 480GB", 989e12, 132},
                      {"NVIDIA A100-SXM4-80GB", 312e12, 0},   {"NVIDIA A10", 125e12, 0},
                      {"NVIDIA L40S", 362e12, 0},             {"NVIDIA GeForce RTX 4090", 165.2e12, 0},
                      {"Some Future GPU", 0, 0}};
  for (const Row& r : rows) {
    EXPECT_EQ(gpu_peak_flops(r.name), r.peak) << r.name;
    EXPECT_EQ(hopper_multiprocessors(r.name), r.hopper_sms) << r.name;
  }

  DeviceInfo h200{"NVIDIA H200", true, 989e12};
  ThroughputModel tm(testing::tiny_llama_config(), 16, h200);
  StepMetrics m = tm.measure(1000, 0.5, 0.1);
  EXPECT_DOUBLE_EQ(m.tokens_per_s, 2000);
  EXPECT_DOUBLE_EQ(m.achieved_flops, 2000 * testing::tiny_llama_config().flops_per_token(16));
  EXPECT_DOUBLE_EQ(m.mfu, m.achieved_flops / 989e12);
  EXPECT_DOUBLE_EQ(m.hfu, m.mfu);  // no recompute yet
  // Two ranks computing the same tokens in the same time: each GPU's share is half.
  const ThroughputModel two(testing::tiny_llama_config(), 16, h200, 0, 2);
  const StepMetrics both = two.measure(1000, 0.5, 0.1);
  EXPECT_DOUBLE_EQ(both.tokens_per_s, 2000);
  EXPECT_DOUBLE_EQ(both.mfu, m.mfu / 2);
  EXPECT_DOUBLE_EQ(both.hfu, both.mfu);
}

TEST_F(TrainerTest, ResumeContinuesBitwise) {
  std::vector<double> whole = train(config("whole"));
  ASSERT_EQ(whole.size(), 6u);
  EXPECT_LT(whole.back(), whole.front());

  TrainResult stopped;
  std::vector<double> first = train(config("split"), 3, &stopped);
  EXPECT_EQ(stopped.exit_code, 128 + SIGINT);
  EXPECT_EQ(stopped.step, 3);
  ASSERT_TRUE(is_checkpoint(dir_.path("split/step_000003")));

  TrainConfig resume = config("split");
  resume.resume = true;
  std::vector<double> rest = train(resume);
  first.insert(first.end(), rest.begin(), rest.end());
  ASSERT_EQ(first.size(), whole.size());
  for (size_t i = 0; i < whole.size(); i++) EXPECT_EQ(first[i], whole[i]) << "step " << i + 1;

  // The weights and optimizer state at the end are the same bytes.
  for (const char* file : {"model.safetensors", "optimizer.safetensors"})
    EXPECT_EQ(fs::read_file(dir_.path(std::string("whole/step_000006/") + file)),
              fs::read_file(dir_.path(std::string("split/step_000006/") + file)))
        << file;
  // The log has every step once, and the validations at steps 3 and 6.
  std::string log = fs::read_file(dir_.path("split/log.jsonl"));
  int steps = 0, vals = 0;
  for (size_t at = 0; (at = log.find("\"loss\"", at)) != std::string::npos; at++) steps++;
  for (size_t at = 0; (at = log.find("\"val_loss\"", at)) != std::string::npos; at++) vals++;
  EXPECT_EQ(steps, 6);
  EXPECT_EQ(vals, 2);
}

// Offloading the optimizer state (in chunks that cut the parameter segments) and recomputing give the
// losses, weights and optimizer state of the plain run, bit for bit, and resume the same way.
// --fp8 on the CPU backend: a clear error before any training, naming what it needs.
// The step lines say how long the run has gone and has left, the last line its wall time; a validation reports
// its progress batch by batch (the bar on stderr) and counts every token it reports.
TEST_F(TrainerTest, LinesShowElapsedTimeEtaAndWallTime) {
  TrainConfig c = config("pace");
  ::testing::internal::CaptureStdout();
  train(c);
  const std::string out = ::testing::internal::GetCapturedStdout();
  for (const std::string& line : split_lines(out)) {
    if (line.rfind("step ", 0) != 0 || line.find("| loss ") == std::string::npos) continue;
    EXPECT_NE(line.find(" elapsed, ETA "), std::string::npos) << line;
    EXPECT_TRUE(line.find(" s/step)") != std::string::npos || line.find(" steps/s)") != std::string::npos) << line;
  }
  EXPECT_NE(out.find("step 6/6 |"), std::string::npos) << out;
  EXPECT_NE(out.find(", ETA 0s ("), std::string::npos) << out;
  EXPECT_NE(out.find("; wall time "), std::string::npos) << out;

  auto ops = make_cpu_ops(DType::F32);
  Model model(testing::tiny_llama_config(), *ops, ModelOptions{2, 16, false});
  model.init_params(3);
  LoaderOptions lo;
  lo.data_dir = data_;
  lo.B = 2;
  lo.T = 16;
  auto loader = DataLoader::open(lo);
  int64_t reported = 0, calls = 0;
  const LossSum l = evaluate(model, *loader, 3, [&](int64_t tokens) {
    reported += tokens;
    calls++;
  });
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(reported, l.count);
}

// A run no longer than its warm-up never decays its learning rate: the run says so.
TEST_F(TrainerTest, AWarmUpAsLongAsTheRunIsSaid) {
  TrainConfig c = config("warm");
  c.steps = 3;
  c.warmup = 100;
  ::testing::internal::CaptureStderr();
  train(c);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("--warmup 100 is longer than the run's 3 steps: the learning rate rises to its peak at the last "
                     "step and never decays"),
            std::string::npos)
      << err;
}

TEST_F(TrainerTest, Fp8OnTheCpuIsAClearError) {
  TrainConfig c = config("fp8");
  c.fp8 = true;
  try {
    train(c);
    FAIL() << "--fp8 on the CPU backend trained";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--fp8 needs the CUDA backend"), std::string::npos) << e.what();
  }
}

// --fp8-lm-head puts the LM head with the linears in FP8: alone it is a clear error, before any training.
TEST_F(TrainerTest, Fp8LmHeadWithoutFp8IsAClearError) {
  TrainConfig c = config("fp8-lm-head");
  c.fp8_lm_head = true;
  try {
    train(c);
    FAIL() << "--fp8-lm-head without --fp8 trained";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--fp8-lm-head"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("needs --fp8"), std::string::npos) << e.what();
  }
}

// --fp8-scaling takes current or delayed; anything else is refused by name.
TEST_F(TrainerTest, Fp8ScalingOtherThanCurrentOrDelayedIsAClearError) {
  TrainConfig c = config("fp8-scaling");
  c.fp8 = true;
  c.fp8_scaling = "sometimes";
  try {
    train(c);
    FAIL() << "--fp8-scaling sometimes trained";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--fp8-scaling must be one of delayed, current, not 'sometimes'"),
              std::string::npos)
        << e.what();
  }
}

// The trainer state keeps FP8 delayed scaling's amax histories (a resumed --fp8-scaling delayed run scales as
// the uninterrupted one; the GPU check is tests/gpu/run.sh fp8), and leaves the key out when there are none.
TEST(TrainerStateJson, KeepsTheFp8ScalingStateAndOmitsItWhenThereIsNone) {
  TrainerState s;
  s.step = 3;
  s.fp8_scaling = {{"history_len", 16},
                   {"steps", 3},
                   {"amax", {{"model.layers.0.mlp.down_proj.weight", std::vector<float>(51, 0.5f)}}}};
  const TrainerState back = TrainerState::from_json(s.to_json(), "test");
  EXPECT_EQ(back.fp8_scaling, s.fp8_scaling);
  EXPECT_EQ(back.step, 3);
  const TrainerState none;
  EXPECT_FALSE(none.to_json().contains("fp8_scaling"));
  EXPECT_TRUE(TrainerState::from_json(none.to_json(), "test").fp8_scaling.is_null());
}

TEST_F(TrainerTest, OffloadAndRecomputeGiveBitwiseThePlainRun) {
  std::vector<double> plain = train(config("plain"));
  TrainConfig c = config("offload");
  c.offload = "optimizer";
  c.offload_chunk = 1000;
  c.recompute = "norm,swiglu,qkv";
  TrainResult stopped;
  std::vector<double> first = train(c, 3, &stopped);
  ASSERT_EQ(stopped.step, 3);
  c.resume = true;
  std::vector<double> rest = train(c);
  first.insert(first.end(), rest.begin(), rest.end());
  ASSERT_EQ(first.size(), plain.size());
  for (size_t i = 0; i < plain.size(); i++) EXPECT_EQ(first[i], plain[i]) << "step " << i + 1;
  // The state really lived on the host: the device held only the chunk staging, and the shared recompute scratch.
  const std::string memory = fs::read_file(dir_.path("offload/memory.json"));
  EXPECT_NE(memory.find("offload staging: m chunk"), std::string::npos) << memory;
  EXPECT_EQ(memory.find("\"AdamW first moments\""), std::string::npos) << memory;
  for (const char* file : {"model.safetensors", "optimizer.safetensors"})
    EXPECT_EQ(fs::read_file(dir_.path(std::string("plain/step_000006/") + file)),
              fs::read_file(dir_.path(std::string("offload/step_000006/") + file)))
        << file;
}

// Gradients in host memory too, with accumulation over 3 micro-batches (so that each layer's gradients go
// down, come back up and go down again in a step): the plain run's losses, weights and optimizer state.
TEST_F(TrainerTest, GradientOffloadGivesBitwiseThePlainRun) {
  TrainConfig p = config("plain-accum");
  p.batch_tokens = 3 * p.batch * p.seq;
  std::vector<double> plain = train(p);
  TrainConfig c = config("offload-grads");
  c.batch_tokens = p.batch_tokens;
  c.offload = "optimizer,gradients";
  c.offload_chunk = 1000;
  std::vector<double> offloaded = train(c);
  ASSERT_EQ(offloaded.size(), plain.size());
  for (size_t i = 0; i < plain.size(); i++) EXPECT_EQ(offloaded[i], plain[i]) << "step " << i + 1;
  const std::string memory = fs::read_file(dir_.path("offload-grads/memory.json"));
  EXPECT_NE(memory.find("gradient staging: layers"), std::string::npos) << memory;
  EXPECT_EQ(memory.find("\"parameter gradients\""), std::string::npos) << memory;
  for (const char* file : {"model.safetensors", "optimizer.safetensors"})
    EXPECT_EQ(fs::read_file(dir_.path(std::string("plain-accum/step_000006/") + file)),
              fs::read_file(dir_.path(std::string("offload-grads/step_000006/") + file)))
        << file;
}

// Narrow moments resume bitwise: the checkpoint holds their f32 values, which encode back to the same
// state; offloaded (chunks of whole int8 blocks: 1000 rounds down to 768; int8 with the gradients in host
// memory too) they give the device run's bits.
TEST_F(TrainerTest, NarrowMomentsResumeAndOffloadBitwise) {
  for (const char* moments : {"bf16", "int8"}) {
    SCOPED_TRACE(moments);
    const std::string name = moments;
    TrainConfig c = config(name + "_whole");
    c.moments = moments;
    std::vector<double> whole = train(c);
    ASSERT_EQ(whole.size(), 6u);
    EXPECT_LT(whole.back(), whole.front());

    TrainConfig split = config(name + "_split");
    split.moments = moments;
    split.offload = name == "bf16" ? "optimizer" : "optimizer,gradients";
    split.offload_chunk = 1000;
    TrainResult stopped;
    std::vector<double> first = train(split, 3, &stopped);
    ASSERT_EQ(stopped.step, 3);
    split.resume = true;
    std::vector<double> rest = train(split);
    first.insert(first.end(), rest.begin(), rest.end());
    ASSERT_EQ(first.size(), whole.size());
    for (size_t i = 0; i < whole.size(); i++) EXPECT_EQ(first[i], whole[i]) << "step " << i + 1;
    for (const char* file : {"model.safetensors", "optimizer.safetensors"})
      EXPECT_EQ(fs::read_file(dir_.path(name + "_whole/step_000006/" + file)),
                fs::read_file(dir_.path(name + "_split/step_000006/" + file)))
          << file;
    // The moments differ from f32 ones (they are rounded), and take the memory of their precision.
    const std::string memory = fs::read_file(dir_.path(name + "_whole/memory.json"));
    // The data's 257 tokens, padded; narrow moments pad the layout's units to whole int8 blocks.
    const int64_t P = ParamLayout::build(testing::tiny_llama_config(320), kMomentBlock).total;
    const nlohmann::json rows = nlohmann::json::parse(memory)["rows"];
    std::map<std::string, int64_t> bytes;
    for (const nlohmann::json& r : rows) bytes[r["component"].get<std::string>()] = r["bytes"].get<int64_t>();
    const int64_t per = name == "bf16" ? 2 : 1;
    EXPECT_EQ(bytes["AdamW first moments"], per * P) << memory;
    EXPECT_EQ(bytes["AdamW second moments"], per * P) << memory;
    EXPECT_EQ(bytes.count("AdamW int8 block scales") ? bytes["AdamW int8 block scales"] : 0,
              name == "int8" ? int64_t(2 * 4 * ((P + 255) / 256)) : 0)
        << memory;
  }
}

// The quality test: 500 steps of a small model to near convergence, with bf16 and with int8 moments, end
// within 0.05 nats of the f32 moments' validation loss, with beta2 0.95 and 0.999 (measured: f32 0.873
// to 0.882 nats from 5.5 at the start; bf16 and int8 0.001 to 0.047 away over seeds 1 and 2, the farthest int8 at
// beta2 0.999 and seed 1: the size of the difference any perturbation of the trajectory makes, e.g. another
// seed's, which moved int8's from 0.047 to 0.021).
TEST_F(TrainerTest, NarrowMomentsTrainAsWellAsF32) {
  const int omp_threads = omp_get_max_threads();
  omp_set_num_threads(1);  // tiny ops: one thread is fastest, and the test's time does not depend on the load
  for (double beta2 : {0.95, 0.999}) {
    std::map<std::string, double> val;
    for (const char* moments : {"f32", "bf16", "int8"}) {
      TrainConfig c = config(fmt::format("quality_{}_{}", moments, beta2));
      c.moments = moments;
      c.vocab_size = 257;  // the data's, unpadded: the tolerances below were measured with it
      c.batch = 4;
      c.seq = 32;
      c.steps = 500;
      c.lr = 6e-3;
      c.warmup = 30;
      c.beta2 = beta2;
      c.eval_every = 0;
      c.eval_tokens = 4096;
      TrainResult res;
      train(c, -1, &res);
      val[moments] = res.val_loss;
    }
    SCOPED_TRACE(fmt::format("beta2 {}: f32 {:.4f}, bf16 {:.4f}, int8 {:.4f}", beta2, val["f32"], val["bf16"],
                             val["int8"]));
    EXPECT_LT(val["f32"], 1.0);  // the run learnt the words
    EXPECT_NEAR(val["bf16"], val["f32"], 0.05);
    EXPECT_NEAR(val["int8"], val["f32"], 0.05);
  }
  omp_set_num_threads(omp_threads);
}

// Resuming from an older checkpoint would mix two histories in one directory: refused unless
// --overwrite, which deletes the later checkpoints; the retrained steps repeat the first run's losses.
TEST_F(TrainerTest, ResumingFromAnOlderCheckpointReplacesTheLaterOnes) {
  TrainConfig c = config("rewind");
  c.steps = 4;
  c.save_every = 2;
  c.eval_tokens = 0;
  std::vector<double> first = train(c);
  TrainConfig rewind = c;
  rewind.resume = true;
  rewind.resume_from = dir_.path("rewind/step_000002");
  std::string msg = error_of([&] { train(rewind); });
  EXPECT_NE(msg.find("step_000004"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--overwrite"), std::string::npos) << msg;

  rewind.overwrite = true;
  std::vector<double> again = train(rewind);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0], first[2]);
  EXPECT_EQ(again[1], first[3]);
}

TEST_F(TrainerTest, NonFiniteLossStopsAndKeepsTheLastCheckpoint) {
  TrainConfig c = config("nan");
  c.lr = 1e30;  // the first update throws the weights far past what float32 activations can hold
  c.warmup = 0;
  c.grad_clip = 0;
  c.save_every = 1;
  std::string msg = error_of([&] { train(c); });
  EXPECT_NE(msg.find("at step 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("step_000001"), std::string::npos) << msg;
  // The log's last record is the step that diverged: loss null, "diverged": true.
  const std::vector<std::string> log = split_lines(fs::read_file(dir_.path("nan/log.jsonl")));
  ASSERT_FALSE(log.empty());
  const nlohmann::json last = nlohmann::json::parse(log.back());
  EXPECT_EQ(last["step"], 2) << log.back();
  EXPECT_TRUE(last["loss"].is_null()) << log.back();
  EXPECT_EQ(last["diverged"], true) << log.back();
  EXPECT_TRUE(last.contains("lr") && last.contains("grad_norm") && last.contains("elapsed_s")) << log.back();
  EXPECT_TRUE(is_checkpoint(dir_.path("nan/step_000001")));
  EXPECT_EQ(list_checkpoints(dir_.path("nan")).size(), 1u);
  for (const auto& e : stdfs::directory_iterator(dir_.path("nan")))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

TEST_F(TrainerTest, RefusesARunDirectoryHoldingAnotherRun) {
  TrainConfig c = config("taken");
  c.steps = 1;
  c.warmup = 0;
  train(c);
  std::string msg = error_of([&] { train(c); });
  EXPECT_NE(msg.find("already holds a run"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--overwrite"), std::string::npos) << msg;
  c.overwrite = true;
  EXPECT_EQ(train(c).size(), 1u);

  TrainConfig fresh = config("empty");
  fresh.resume = true;
  EXPECT_NE(error_of([&] { train(fresh); }).find("no checkpoint"), std::string::npos);
}

TEST(RunDir, ClearingRemovesTheRunsFilesAndNothingElse) {
  TempDir dir;
  const RunDir run(dir.path("run"));
  run.clear();  // creates it
  for (const char* name : {"config.json", "log.jsonl", "memory.json", "report.html"})
    fs::write_file_atomic(dir.path(std::string("run/") + name), "{}\n");
  stdfs::create_directories(dir.path("run/step_000002"));
  stdfs::create_directories(dir.path("run/.tmp-step_000003"));
  EXPECT_NE(error_of([&] { run.check_free(false); }).find("already holds a run"), std::string::npos);
  run.check_free(true);
  run.clear();
  std::set<std::string> left;
  for (const auto& e : stdfs::directory_iterator(run.path())) left.insert(e.path().filename().string());
  EXPECT_EQ(left, (std::set<std::string>{".tokamak-run", "memory.json", "report.html"}));
  run.check_free(false);
}

TEST(RunLog, RecordsStepsAndValidationsAndTruncatesAfterAStep) {
  TempDir dir;
  const std::string path = dir.path("log.jsonl");
  {
    RunLog log(path);
    for (int64_t step = 1; step <= 3; step++) {
      StepRecord r;
      r.step = step;
      r.loss = 5.0 - double(step);
      r.metrics.mfu = -1;  // unknown peak: null
      log.step(r, 0.5 * double(step));
    }
    log.validation(2, LossSum{6.0, 3}, 0.25);
  }
  std::vector<nlohmann::ordered_json> records;
  for (const std::string& line : split_lines(fs::read_file(path)))
    records.push_back(nlohmann::ordered_json::parse(line));
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(records[0]["loss"], 4.0);
  EXPECT_TRUE(records[0]["mfu"].is_null());
  EXPECT_EQ(records[2]["elapsed_s"], 1.5);
  EXPECT_EQ(records[3]["val_loss"], 2.0);
  EXPECT_EQ(records[3]["val_tokens"], 3);
  const std::vector<std::string> keys = {"step",         "loss",          "lr",          "grad_norm",
                                         "clip_scale",   "tokens",        "trained_tokens", "step_time_s",
                                         "tokens_per_s", "flops_per_s",   "mfu",         "hfu",
                                         "data_wait_s",  "memory_bytes",  "time",        "elapsed_s"};
  std::vector<std::string> got;
  for (const auto& [k, v] : records[0].items()) got.push_back(k);
  EXPECT_EQ(got, keys);  // the order `tokamak report` and other readers see

  truncate_run_log(path, 2);
  const std::vector<std::string> kept = split_lines(fs::read_file(path));
  ASSERT_EQ(kept.size(), 3u);  // steps 1 and 2, and step 2's validation
  EXPECT_EQ(nlohmann::json::parse(kept.back())["val_loss"], 2.0);
}

TEST_F(TrainerTest, KeepsTheNewestCheckpoints) {
  TrainConfig c = config("keep");
  c.steps = 5;
  c.save_every = 1;
  c.keep_checkpoints = 2;
  c.eval_tokens = 0;
  train(c);
  std::vector<std::string> kept = list_checkpoints(dir_.path("keep"));
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(stdfs::path(kept[0]).filename(), "step_000004");
  EXPECT_EQ(stdfs::path(kept[1]).filename(), "step_000005");
  EXPECT_EQ(resolve_checkpoint(dir_.path("keep/latest")), kept[1]);
}

TEST_F(TrainerTest, CheckpointOfAnotherModelIsRefusedByName) {
  TrainConfig c = config("other");
  c.steps = 1;
  c.warmup = 0;
  c.eval_tokens = 0;
  train(c);
  ModelConfig deeper = testing::tiny_llama_config();
  deeper.n_layers = 3;
  TrainConfig resume = c;
  resume.model = write_config(dir_, deeper, "deeper.json");
  resume.resume = true;
  resume.steps = 2;
  std::string msg = error_of([&] { train(resume); });
  EXPECT_NE(msg.find("num_hidden_layers = 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("num_hidden_layers = 3"), std::string::npos) << msg;

  stdfs::remove(dir_.path("other/step_000001/optimizer.safetensors"));
  c.resume = true;
  c.steps = 2;
  EXPECT_NE(error_of([&] { train(c); }).find("optimizer.safetensors"), std::string::npos);
}

// A model trained from scratch takes the data's vocabulary (257 byte tokens here), padded to a multiple of 64, and
// records it as the run's vocab_size; --vocab-size overrides it, never below the data's; a model with weights keeps
// its own.
TEST_F(TrainerTest, VocabularyComesFromTheDataUnlessGiven) {
  auto config_of = [&](const std::string& run) {
    return nlohmann::json::parse(fs::read_file(dir_.path(run + "/config.json")));
  };
  auto vocab_of_run = [&](const std::string& run) { return config_of(run)["model"]["vocab_size"].get<int>(); };
  TrainConfig c = config("from_data");
  c.steps = 1;
  c.warmup = 0;
  ASSERT_EQ(testing::tiny_llama_config().vocab_size, 257);  // the model's own, unpadded
  train(c);
  EXPECT_EQ(vocab_of_run("from_data"), 320);
  EXPECT_EQ(config_of("from_data")["train"]["vocab_size"], 320);  // what a repeat of the run builds

  c = config("given");
  c.steps = 1;
  c.warmup = 0;
  c.vocab_size = 300;
  train(c);
  EXPECT_EQ(vocab_of_run("given"), 300);

  // A checkpoint has weights: its vocabulary stays, though the data's padded would be 320.
  c = config("with_weights");
  c.steps = 1;
  c.warmup = 0;
  c.model = dir_.path("given/step_000001");
  train(c);
  EXPECT_EQ(vocab_of_run("with_weights"), 300);

  c = config("too_small");
  c.vocab_size = 200;
  std::string msg = error_of([&] { train(c); });
  EXPECT_NE(msg.find("--vocab-size 200 is smaller than the vocabulary of the data"), std::string::npos) << msg;
  c.vocab_size = 0;
  c.model = write_config(dir_, testing::tiny_llama_config(200), "small-vocab.json");
  EXPECT_EQ(train(c).size(), 6u);  // from scratch: the data's vocabulary, not the config's 200
}

// The data must fit a model with weights, whose vocabulary is its own.
TEST_F(TrainerTest, RefusesDataOfALargerVocabularyThanTheWeights) {
  const ModelConfig small = testing::tiny_llama_config(200);
  const ParamLayout layout = ParamLayout::build(small);
  export_hf(small, layout, std::vector<float>(size_t(layout.total), 0.01f), dir_.path("small_hf"), "f32", "");
  TrainConfig c = config("vocab");
  c.model = dir_.path("small_hf");
  std::string msg = error_of([&] { train(c); });
  EXPECT_NE(msg.find("(vocab 257) but the model has vocab 200"), std::string::npos) << msg;
}

TEST_F(TrainerTest, GlobalBatchMustBeWholeMicroBatches) {
  TrainConfig c = config("accum");
  c.batch_tokens = 48;  // micro-batches are 2 x 16 = 32 tokens
  EXPECT_NE(error_of([&] { train(c); }).find("not a multiple"), std::string::npos);
}

// B=2 in one micro-batch and B=1 accumulated over two give the same mean-loss gradients.
TEST_F(TrainerTest, AccumulationMatchesOneLargerMicroBatch) {
  auto grads_of = [&](int B, int micro_steps, double* loss) {
    auto ops = make_cpu_ops(DType::F32);
    Model model(testing::tiny_llama_config(), *ops, ModelOptions{B, 16, false});
    model.init_params(11);
    LoaderOptions lo;
    lo.data_dir = data_;
    lo.B = B;
    lo.T = 16;
    lo.shuffle = false;  // B=2's batch is windows 0 and 1, as are B=1's first two batches
    auto loader = DataLoader::open(lo);
    *loss = accumulate_gradients(model, *loader, micro_steps, 1).mean();
    return model.grads_f32();
  };
  double loss_big = 0, loss_accum = 0;
  std::vector<float> big = grads_of(2, 1, &loss_big), accum = grads_of(1, 2, &loss_accum);
  ASSERT_EQ(big.size(), accum.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < big.size(); i++) {
    diff += (double(big[i]) - accum[i]) * (double(big[i]) - accum[i]);
    norm += double(big[i]) * big[i];
  }
  ASSERT_GT(norm, 0);
  EXPECT_LT(std::sqrt(diff / norm), 1e-6);
  EXPECT_NEAR(loss_big, loss_accum, 1e-6 * loss_big);
}

// tokamak eval's number is docs/eval.md's definition, computed here window by window from the shard
// tokens, and it does not depend on how many windows share a forward pass.
TEST_F(TrainerTest, SplitEvaluationFollowsTheDocumentedWindows) {
  const int T = 16;
  const ModelConfig cfg = testing::tiny_llama_config();
  auto ops = make_cpu_ops(DType::F32);
  std::vector<float> weights;
  {
    Model m(cfg, *ops, ModelOptions{1, T, false});
    m.init_params(5);
    weights = m.params_f32();
  }
  const DatasetMeta meta = read_dataset_meta(data_);
  std::vector<int32_t> stream;
  for (const std::string& path : meta.val_shards) {
    ShardReader r(path);
    std::vector<int32_t> tokens(r.tokens());
    r.read(0, r.tokens(), tokens.data());
    stream.insert(stream.end(), tokens.begin(), tokens.end());
  }
  const int64_t windows = 7;  // not a multiple of B = 3: the last window runs alone
  ASSERT_GE(int64_t(stream.size()), windows * T + 1);

  Model one(cfg, *ops, ModelOptions{1, T, false});
  one.set_params_f32(weights);
  double sum = 0;
  for (int64_t w = 0; w < windows; w++) {
    const OwnedBatch window(1, T, std::vector<int32_t>(stream.begin() + w * T, stream.begin() + (w + 1) * T + 1));
    sum += one.forward(window.batch()).sum;
  }
  const double expected = sum / double(windows * T);

  SplitEvalOptions o;
  o.data_dir = data_;
  o.T = T;
  o.max_tokens = windows * T + T - 1;  // rounds down to whole windows
  for (int B : {1, 3}) {
    o.B = B;
    SplitEval r = evaluate_split(cfg, weights, *ops, o);
    EXPECT_EQ(r.windows, windows);
    EXPECT_EQ(r.tokens, windows * T);
    EXPECT_NEAR(r.loss, expected, 1e-6 * expected) << "B=" << B;
    EXPECT_NEAR(r.perplexity, std::exp(expected), 1e-5 * std::exp(expected));
  }
}

// ---- the run directory: one writer, complete checkpoints, failures after a step ----------------------------

// The losses of the steps recorded in a run's log.jsonl, by step.
std::map<int64_t, double> logged_losses(const std::string& run_dir) {
  std::map<int64_t, double> out;
  for (const std::string& line : split_lines(fs::read_file(run_dir + "/log.jsonl"))) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("loss")) out[j["step"].get<int64_t>()] = j["loss"].get<double>();
  }
  return out;
}

// A second trainer on the same --out, fresh with --overwrite or resuming, is refused at once by name, and the
// first carries on as if alone: the same losses and the same final weights, bit for bit.
TEST_F(TrainerTest, SecondWriterIsRefusedAndTheFirstRunsAsIfAlone) {
  TrainConfig c = config("alone");
  c.save_every = 1;
  c.keep_checkpoints = 2;
  const std::vector<double> alone = train(c);

  TrainConfig first = config("shared");
  first.save_every = 1;
  first.keep_checkpoints = 2;
  std::vector<std::string> refusals;
  std::vector<double> losses;
  Trainer t(first);
  t.on_step = [&](const StepRecord& r) {
    losses.push_back(r.loss);
    if (r.step != 3) return;
    TrainConfig fresh = config("shared");
    fresh.overwrite = true;
    TrainConfig resume = config("shared");
    resume.resume = true;
    for (const TrainConfig& second : {fresh, resume}) refusals.push_back(error_of([&] { Trainer(second).run(); }));
  };
  EXPECT_EQ(t.run().exit_code, 0);
  ASSERT_EQ(refusals.size(), 2u);
  for (const std::string& msg : refusals) {
    EXPECT_NE(msg.find("is in use by another process"), std::string::npos) << msg;
    EXPECT_NE(msg.find(fmt::format("pid {} on", ::getpid())), std::string::npos) << msg;
  }
  EXPECT_EQ(losses, alone);
  for (const char* file : {"model.safetensors", "optimizer.safetensors"})
    EXPECT_EQ(fs::read_file(dir_.path(std::string("alone/step_000006/") + file)),
              fs::read_file(dir_.path(std::string("shared/step_000006/") + file)))
        << file;
  EXPECT_EQ(logged_losses(dir_.path("shared")).size(), 6u);
}

// A lock file whose record names a process that is gone (a killed run) does not block: only the flock counts.
TEST_F(TrainerTest, ALockLeftByAKilledRunDoesNotBlock) {
  TrainConfig c = config("stale");
  c.steps = 1;
  c.eval_tokens = 0;
  stdfs::create_directories(c.out);
  testing::write_text(c.out + "/" + RunDirLock::kFileName,
                      R"({"pid":999999999,"host":"elsewhere","command":"tokamak train","started":0})");
  EXPECT_EQ(train(c).size(), 1u);
}

// SIGHUP (a closed terminal) stops the run as SIGTERM does: the step is saved, the exit code is 128 + 1,
// and the run resumes bitwise.
TEST_F(TrainerTest, SighupSavesAndStopsLikeSigterm) {
  const std::vector<double> whole = train(config("hup_whole"));
  TrainResult stopped;
  std::vector<double> first = train(config("hup"), 3, &stopped, SIGHUP);
  EXPECT_EQ(stopped.exit_code, 128 + SIGHUP);
  EXPECT_EQ(stopped.step, 3);
  ASSERT_TRUE(is_checkpoint(dir_.path("hup/step_000003")));
  TrainConfig resume = config("hup");
  resume.resume = true;
  const std::vector<double> rest = train(resume);
  first.insert(first.end(), rest.begin(), rest.end());
  EXPECT_EQ(first, whole);
}

// The log's descriptor made to write to /dev/full: from now on every record fails with ENOSPC, as on a full disk.
void fill_the_disk_under(const std::string& file) {
  const stdfs::path target = stdfs::canonical(file);
  for (const auto& e : stdfs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (stdfs::read_symlink(e.path(), ec) != target) continue;
    const int full = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
    ASSERT_GE(full, 0);
    ASSERT_GE(::dup2(full, std::stoi(e.path().filename().string())), 0);
    ::close(full);
    return;
  }
  FAIL() << file << " is not open";
}

// A log write that fails after a step (a full disk) saves that step and says so, naming the file and the cause;
// the run then resumes from it bitwise (the failed step's record is the one missing from the log).
TEST_F(TrainerTest, ALogWriteThatFailsSavesTheStepAndSaysSo) {
  TrainConfig c = config("full_whole");
  c.eval_tokens = 0;
  const std::vector<double> whole = train(c);
  c.out = dir_.path("full");
  c.save_every = 0;  // nothing would be saved before the end
  std::string msg;
  {
    Trainer t(c);
    t.on_step = [&](const StepRecord& r) {
      if (r.step == 3) fill_the_disk_under(c.out + "/log.jsonl");
    };
    msg = error_of([&] { t.run(); });
  }
  EXPECT_NE(msg.find("log.jsonl"), std::string::npos) << msg;
  EXPECT_NE(msg.find("No space left on device"), std::string::npos) << msg;
  EXPECT_NE(msg.find("step_000004"), std::string::npos) << msg;
  ASSERT_TRUE(is_checkpoint(dir_.path("full/step_000004")));

  c.resume = true;
  const std::vector<double> rest = train(c);
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(rest[0], whole[4]);
  EXPECT_EQ(rest[1], whole[5]);
  const std::map<int64_t, double> logged = logged_losses(c.out);
  EXPECT_EQ(logged.size(), 5u);
  EXPECT_EQ(logged.count(4), 0u);
}

// memory.json that cannot be written (a directory in its place) after the first step: the step is saved, and the
// error names the file.
TEST_F(TrainerTest, AMemoryTableThatCannotBeWrittenSavesTheStep) {
  TrainConfig c = config("memtable");
  c.save_every = 0;
  stdfs::create_directories(c.out + "/memory.json");
  const std::string msg = error_of([&] { train(c); });
  EXPECT_NE(msg.find(c.out + "/memory.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("its checkpoint was saved"), std::string::npos) << msg;
  EXPECT_TRUE(is_checkpoint(dir_.path("memtable/step_000001")));
}

// Turns a checkpoint written now into the layout of the versions before complete.json: no marker, and no
// "checkpoint_format" in its trainer state.
void make_unmarked(const std::string& dir) {
  stdfs::remove(dir + "/complete.json");
  nlohmann::json state = nlohmann::json::parse(fs::read_file(dir + "/trainer_state.json"));
  state.erase("checkpoint_format");
  fs::write_file_atomic(dir + "/trainer_state.json", state.dump(2) + "\n");
}

// A step_* directory counts only when complete. What a kill during pruning left on earlier versions (config.json
// and trainer_state.json only), a save cut short before its marker, and a file shorter than the marker records
// are each ignored with their name, and resume takes the last complete checkpoint, bitwise; named explicitly, an
// incomplete checkpoint is an error, never read as a Hugging Face directory.
TEST_F(TrainerTest, OnlyCompleteCheckpointsCount) {
  TrainConfig c = config("partial");
  c.save_every = 1;
  c.steps = 4;
  c.eval_tokens = 0;
  const std::vector<double> whole = train(c);
  const std::string run = c.out;
  for (const std::string& name : {"complete.json", "model.safetensors", "optimizer.safetensors"})
    stdfs::remove(run + "/step_000004/" + name);
  make_unmarked(run + "/step_000004");  // on earlier versions, a prune cut short
  stdfs::remove(run + "/step_000003/complete.json");  // a save cut short
  stdfs::resize_file(run + "/step_000002/model.safetensors", 100);
  EXPECT_EQ(list_checkpoints(run), std::vector<std::string>{run + "/step_000001"});
  EXPECT_EQ(resolve_checkpoint(run), run + "/step_000001");
  EXPECT_NE(checkpoint_incomplete_reason(run + "/step_000004").find("model.safetensors is missing"), std::string::npos);
  EXPECT_NE(checkpoint_incomplete_reason(run + "/step_000003").find("complete.json is missing"), std::string::npos);
  EXPECT_NE(checkpoint_incomplete_reason(run + "/step_000002").find("has 100 bytes"), std::string::npos);
  for (const char* step : {"step_000002", "step_000003", "step_000004"}) {
    const std::string dir = run + "/" + step;
    EXPECT_NE(error_of([&] { resolve_checkpoint(dir); }).find("not a complete checkpoint"), std::string::npos) << step;
    EXPECT_NE(error_of([&] { find_model_source(dir); }).find("not a complete checkpoint"), std::string::npos) << step;
  }

  c.resume = true;
  c.overwrite = true;  // the incomplete later ones are replaced as the run saves those steps again
  const std::vector<double> rest = train(c);
  ASSERT_EQ(rest.size(), 3u);
  for (size_t i = 0; i < rest.size(); i++) EXPECT_EQ(rest[i], whole[i + 1]) << "step " << i + 2;
  EXPECT_EQ(list_checkpoints(run).size(), 4u);
}

// A checkpoint written before complete.json existed loads: resume continues from it bitwise, eval's and generate's
// model source takes it. One of that layout with a file missing or a safetensors file cut short does not count.
TEST_F(TrainerTest, CheckpointsOfEarlierVersionsStillLoad) {
  TrainConfig c = config("legacy");
  c.steps = 4;
  c.save_every = 2;
  c.eval_tokens = 0;
  const std::vector<double> whole = train(c);
  const std::string run = c.out;
  make_unmarked(run + "/step_000002");
  make_unmarked(run + "/step_000004");
  EXPECT_TRUE(is_checkpoint(run + "/step_000002"));
  EXPECT_EQ(find_model_source(run).checkpoint_dir, run + "/step_000004");

  stdfs::resize_file(run + "/step_000004/optimizer.safetensors", 1000);
  EXPECT_FALSE(is_checkpoint(run + "/step_000004"));
  EXPECT_EQ(resolve_checkpoint(run), run + "/step_000002");
  stdfs::remove(run + "/step_000004/optimizer.safetensors");
  EXPECT_NE(checkpoint_incomplete_reason(run + "/step_000004").find("optimizer.safetensors is missing"),
            std::string::npos);

  c.resume = true;
  c.overwrite = true;
  const std::vector<double> rest = train(c);
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(rest[0], whole[2]);
  EXPECT_EQ(rest[1], whole[3]);
}

// What a killed run leaves half done (checkpoints being written or deleted, the temporaries of its files) is
// removed when the next run takes the directory; the other files stay.
TEST_F(TrainerTest, LeftoversOfAKilledRunAreCleanedAtTheNextStart) {
  TrainConfig c = config("leftovers");
  c.steps = 2;
  c.save_every = 1;
  c.eval_tokens = 0;
  train(c);
  const std::string run = c.out;
  for (const char* dir : {".tmp-step_000003", ".del-step_000001", "step_000001.old"})
    stdfs::create_directories(run + "/" + dir + "/sub");
  for (const char* file : {"config.json.tmp.12345", "log.jsonl.tmp.7", "report.html.tmp.9", "notes.txt"})
    testing::write_text(run + "/" + file, "x");
  c.resume = true;
  c.steps = 3;
  train(c);
  std::set<std::string> left;
  int event_files = 0;  // TensorBoard's, one each time the run starts (a reader takes them together)
  for (const auto& e : stdfs::directory_iterator(run)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("events.out.tfevents.", 0) == 0) event_files++;
    else left.insert(name);
  }
  EXPECT_EQ(event_files, 2);
  EXPECT_EQ(left, (std::set<std::string>{".lock", ".tokamak-run", "config.json", "config.toml", "log.jsonl",
                                         "memory.json", "notes.txt", "report.html.tmp.9", "step_000001", "step_000002",
                                         "step_000003"}));
}

// Keeping the newest checkpoints also removes the incomplete step directories older than them, by name.
TEST_F(TrainerTest, PruningRemovesIncompleteStepDirectoriesOlderThanTheKeptOnes) {
  TrainConfig c = config("prune");
  c.steps = 2;
  c.save_every = 1;
  c.keep_checkpoints = 0;
  c.eval_tokens = 0;
  train(c);
  stdfs::remove(c.out + "/step_000001/complete.json");
  c.resume = true;
  c.steps = 4;
  c.keep_checkpoints = 2;
  train(c);
  EXPECT_EQ(list_checkpoints(c.out), (std::vector<std::string>{c.out + "/step_000003", c.out + "/step_000004"}));
  EXPECT_FALSE(stdfs::exists(c.out + "/step_000001"));
}

// A model larger than the machine is refused before anything is allocated, naming its size, the largest part of
// its plan and the field behind it: the layers, the vocabulary, or the micro-batch.
TEST_F(TrainerTest, AModelLargerThanTheMachineIsRefusedBeforeAllocating) {
  ModelConfig deep = testing::tiny_llama_config();
  deep.d_model = 16384;
  deep.n_heads = 128;
  deep.n_kv_heads = 8;
  deep.head_dim = 128;
  deep.ffn_dim = 53248;
  deep.n_layers = 4000;  // 12.75 trillion parameters
  ModelConfig wide = testing::tiny_llama_config();
  wide.vocab_size = 16'000'000;
  wide.d_model = 65536;  // a trillion parameters of embeddings
  wide.n_heads = 1;
  wide.n_kv_heads = 1;
  wide.head_dim = 64;
  struct Case {
    ModelConfig model;
    int batch;
    const char* field;
  };
  for (const Case& k : {Case{deep, 2, "num_hidden_layers = 4000"}, Case{wide, 2, "vocab_size = 16000000"},
                        Case{testing::tiny_llama_config(), 1 << 24, "--batch 16777216 x --seq 16"}}) {
    TrainConfig c = config("huge");
    c.model = write_config(dir_, k.model, "huge.json");
    c.vocab_size = k.model.vocab_size;  // the config's, not the data's that a model from scratch takes by default
    c.batch = k.batch;
    const auto t0 = std::chrono::steady_clock::now();
    const std::string msg = error_of([&] { train(c); });
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
    EXPECT_NE(msg.find("does not fit this machine"), std::string::npos) << msg;
    EXPECT_NE(msg.find(k.field), std::string::npos) << msg;
    EXPECT_NE(msg.find("physical memory"), std::string::npos) << msg;
    EXPECT_NE(msg.find("the largest part is"), std::string::npos) << msg;
    EXPECT_FALSE(stdfs::exists(c.out)) << "a refused run leaves no directory";
  }
}

// On a GPU a plan that fits only with its optimizer state offloaded is accepted, as long as the machine's memory
// holds that state; the plan without offload is refused with --memory-budget's help.
TEST(MachineMemory, APlanThatFitsWithOffloadIsAccepted) {
  const ModelConfig c = ModelConfig::preset("qwen2.5-0.5b");
  Recipe r;
  r.model = c;
  r.batch = 1;
  r.seq = 1024;
  r.recompute = parse_recompute("block");
  const MemoryPlan on_device = plan_memory(r, PlanTarget());
  r.set_offload("optimizer");
  const MemoryPlan offloaded = plan_memory(r, PlanTarget());
  ASSERT_LT(offloaded.total_bytes, on_device.total_bytes);
  MachineMemory m;
  m.gpu = true;
  m.device = "the memory of the GPU (test)";
  m.device_bytes = (offloaded.total_bytes + on_device.total_bytes) / 2;
  m.host_bytes = 2 * offloaded.host_bytes;
  refuse_plan_larger_than(c, offloaded, m);
  std::string msg = error_of([&] { refuse_plan_larger_than(c, on_device, m); });
  EXPECT_NE(msg.find("the memory of the GPU (test)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--memory-budget"), std::string::npos) << msg;
  m.host_bytes = offloaded.host_bytes / 2;
  msg = error_of([&] { refuse_plan_larger_than(c, offloaded, m); });
  EXPECT_NE(msg.find("offloaded state in host memory"), std::string::npos) << msg;
}

}  // namespace
}  // namespace tk
