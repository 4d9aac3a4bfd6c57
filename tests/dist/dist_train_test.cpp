// Data-parallel training under mpirun on a tiny model (CPU backend, float32), for each ZeRO stage, every rank
// accumulating several micro-batches a step: the losses and final weights of 2 and 3 ranks equal one process's at the
// same global batch within 1e-5 relative; two runs at the same world size are bitwise equal; a resumed run is
// bitwise the uninterrupted one; a checkpoint of 2 ranks resumes on 3 and on 1 within the same tolerance; so do runs
// with int8 moments, with the optimizer offloaded and with the gradients too (ZeRO 2, 3: each rank's slice); `tokamak
// export` writes its weights; each rank's optimizer
// state (ZeRO 1-3), gradients (ZeRO 2, 3) and parameters (ZeRO 3) shrink as the stage says.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "run_testing.h"

namespace tk {
namespace {

using testing::TempDir;
using testing::TokamakChild;

constexpr double kTolerance = 1e-5;
// int8 moments against one process (Int8MomentsShardAsOneProcessQuantises): the f32 moments' tolerance holds, for the
// ranks quantise as one process does (measured: with the noise seeded by each layout's own padded index instead,
// the weights differed by 1e-4 to 4e-4 relative).
constexpr double kInt8Tolerance = kTolerance;

// One run's results: each step's loss (log.jsonl) and the final weights (its last checkpoint).
struct RunResult {
  std::string dir;
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> weights;
};

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class DataParallelTraining : public ::testing::TestWithParam<int> {
 protected:
  // The tiny Llama with 16 layers, for the gradients' memory: deep enough that ZeRO 2's three unit-sized gradient
  // staging buffers are a small part of the gradients, as in real models (with 2 layers they are all of them).
  static ModelConfig deep_config() {
    ModelConfig c = testing::tiny_llama_config();
    c.n_layers = 16;
    return c;
  }

  static void SetUpTestSuite() {
    dir_ = new TempDir();
    data_ = new std::string(testing::make_byte_dataset(*dir_));
    model_ = new std::string(testing::write_model_config(*dir_, testing::tiny_llama_config()));
    deep_model_ = new std::string(testing::write_model_config(*dir_, deep_config(), "deep.json"));
  }
  static void TearDownTestSuite() {
    delete deep_model_;
    delete model_;
    delete data_;
    delete dir_;
  }

  int zero() const { return GetParam(); }

  // `tokamak train`'s arguments for a run into DIR/name; extra flags after the recipe's.
  static std::vector<std::string> train_args(const std::string& name, const std::vector<std::string>& extra) {
    const std::string out = dir_->path(name);
    std::vector<std::string> args = {"train", "--device", "cpu", "--batch", "2", "--seq", "16", "--batch-tokens", "192",
                                     "--steps", "4", "--warmup", "2", "--lr", "3e-3", "--eval-tokens", "0",
                                     "--save-every", "2", "--keep-checkpoints", "0", "--out", out};
    if (std::find(extra.begin(), extra.end(), "--resume") == extra.end()) {
      if (std::find(extra.begin(), extra.end(), "--model") == extra.end()) args.insert(args.end(), {"--model", *model_});
      args.insert(args.end(), {"--data", *data_});
    }
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  // `tokamak train` on `ranks` processes (1: without mpirun) into DIR/name; extra flags after the recipe's.
  static RunResult train(int ranks, const std::string& name, std::vector<std::string> extra = {}) {
    std::vector<std::string> launcher;
    if (ranks > 1) launcher = {TK_MPIEXEC, "-np", std::to_string(ranks), "--oversubscribe"};
    return run_child(name, train_args(name, extra), launcher);
  }

  static RunResult run_child(const std::string& name, const std::vector<std::string>& args,
                             const std::vector<std::string>& launcher) {
    TokamakChild child(args, dir_->path(name + ".output"), 0, launcher);
    const testing::ChildExit e = child.wait();
    EXPECT_TRUE(!e.signaled && e.code == 0) << name << " exited with " << e.code << "\n" << child.out() << child.err();
    return read_run(dir_->path(name));
  }

  static std::vector<nlohmann::json> log_records(const RunResult& r) {
    std::vector<nlohmann::json> records;
    std::ifstream log(r.dir + "/log.jsonl");
    for (std::string line; std::getline(log, line);) records.push_back(nlohmann::json::parse(line));
    return records;
  }

  static RunResult read_run(const std::string& out) {
    RunResult r;
    r.dir = out;
    std::ifstream log(out + "/log.jsonl");
    for (std::string line; std::getline(log, line);) r.losses.push_back(nlohmann::json::parse(line).at("loss"));
    const std::unique_ptr<SafeTensorsFile> f = SafeTensorsFile::open(out + "/step_000004/model.safetensors");
    for (const SafeTensorInfo& t : f->tensors()) r.weights[t.name] = f->read_f32(t.name);
    return r;
  }

  // The one-process run every stage is compared with, and this stage's run on 2 ranks (made once each).
  static const RunResult& one_process() {
    static const RunResult r = train(1, "one");
    return r;
  }
  const RunResult& two_ranks() const {
    static std::map<int, RunResult> runs;
    if (!runs.count(zero())) runs[zero()] = train(2, "two_z" + std::to_string(zero()), {"--zero", std::to_string(zero())});
    return runs[zero()];
  }

  static void expect_close(const RunResult& a, const RunResult& b, bool losses = true,
                           double tolerance = kTolerance) {
    if (losses) {
      ASSERT_EQ(a.losses.size(), 4u) << a.dir;
      ASSERT_EQ(a.losses.size(), b.losses.size()) << a.dir << " vs " << b.dir;
      for (size_t i = 0; i < a.losses.size(); i++)
        EXPECT_NEAR(a.losses[i], b.losses[i], tolerance * std::abs(a.losses[i])) << "step " << i + 1 << " of " << b.dir;
    }
    ASSERT_FALSE(a.weights.empty()) << a.dir;
    ASSERT_EQ(a.weights.size(), b.weights.size());
    for (const auto& [name, w] : a.weights) {
      const std::vector<float>& v = b.weights.at(name);
      ASSERT_EQ(w.size(), v.size()) << name;
      double diff = 0, norm = 0;
      for (size_t i = 0; i < w.size(); i++) {
        diff += (double(w[i]) - v[i]) * (double(w[i]) - v[i]);
        norm += double(w[i]) * w[i];
      }
      EXPECT_LE(std::sqrt(diff), tolerance * std::sqrt(norm)) << name << " of " << b.dir << " vs " << a.dir;
    }
  }

  static TempDir* dir_;
  static std::string* data_;
  static std::string* model_;
  static std::string* deep_model_;
};

TempDir* DataParallelTraining::dir_ = nullptr;
std::string* DataParallelTraining::data_ = nullptr;
std::string* DataParallelTraining::model_ = nullptr;
std::string* DataParallelTraining::deep_model_ = nullptr;

TEST_P(DataParallelTraining, TwoAndThreeRanksComputeWhatOneProcessComputes) {
  expect_close(one_process(), two_ranks());
  expect_close(one_process(), train(3, "three_z" + std::to_string(zero()), {"--zero", std::to_string(zero())}));
}

TEST_P(DataParallelTraining, RunsRepeatAndResumeBitwise) {
  const std::string z = std::to_string(zero());
  const RunResult& first = two_ranks();
  const RunResult again = train(2, "again_z" + z, {"--zero", z});
  EXPECT_EQ(first.losses, again.losses);
  EXPECT_EQ(read_bytes(first.dir + "/step_000004/model.safetensors"),
            read_bytes(again.dir + "/step_000004/model.safetensors"));
  const RunResult resumed = train(2, "resumed_z" + z, {"--zero", z, "--resume", first.dir + "/step_000002"});
  ASSERT_EQ(first.losses.size(), 4u);
  EXPECT_EQ(std::vector<double>(first.losses.begin() + 2, first.losses.end()), resumed.losses);
  for (const auto& e : std::filesystem::directory_iterator(first.dir + "/step_000004")) {
    const std::string name = e.path().filename().string();
    if (name.ends_with(".safetensors"))
      EXPECT_EQ(read_bytes(e.path().string()), read_bytes(resumed.dir + "/step_000004/" + name)) << name;
  }
}

TEST_P(DataParallelTraining, ACheckpointOfTwoRanksResumesOnThreeAndOnOne) {
  const std::string z = std::to_string(zero());
  const std::string from = two_ranks().dir + "/step_000002";
  expect_close(one_process(), train(3, "on_three_z" + z, {"--zero", z, "--resume", from}), false);
  expect_close(one_process(), train(1, "on_one_z" + z, {"--resume", from}), false);
}

// int8 moments (--moments int8) sharded: each rank's slice of a unit is whole blocks of 256, the blocks are those of
// one process (whose units are padded to whole blocks too), and each element's rounding noise is seeded by its index
// in one process's layout (AdamW::noise_index). So the ranks quantise exactly as one process does; what differs is
// only the gradients' summation order (as with f32 moments, within 1e-5 relative), and a code changes only where a
// moment lies within that difference of its rounding threshold (none did in these runs: the f32 tolerance holds; one
// flip would move an element by up to a code step, 12%, of its update). Runs at the same world size, and resumes,
// are bitwise.
TEST_P(DataParallelTraining, Int8MomentsShardAsOneProcessQuantises) {
  const std::string z = std::to_string(zero());
  static const RunResult one = train(1, "int8_one", {"--moments", "int8"});
  const std::vector<std::string> flags = {"--moments", "int8", "--zero", z};
  const RunResult two = train(2, "int8_two_z" + z, flags);
  expect_close(one, two, true, kInt8Tolerance);
  expect_close(one, train(3, "int8_three_z" + z, flags), true, kInt8Tolerance);
  const RunResult again = train(2, "int8_again_z" + z, flags);
  EXPECT_EQ(two.losses, again.losses);
  EXPECT_EQ(read_bytes(two.dir + "/step_000004/model.safetensors"),
            read_bytes(again.dir + "/step_000004/model.safetensors"));
  std::vector<std::string> resume = flags;
  resume.insert(resume.end(), {"--resume", two.dir + "/step_000002"});
  const RunResult resumed = train(2, "int8_resumed_z" + z, resume);
  ASSERT_EQ(two.losses.size(), 4u);
  EXPECT_EQ(std::vector<double>(two.losses.begin() + 2, two.losses.end()), resumed.losses);
  for (const auto& e : std::filesystem::directory_iterator(two.dir + "/step_000004")) {
    const std::string name = e.path().filename().string();
    if (name.ends_with(".safetensors"))
      EXPECT_EQ(read_bytes(e.path().string()), read_bytes(resumed.dir + "/step_000004/" + name)) << name;
  }
  // The 2-rank checkpoint's shards put together and re-sliced for 3 ranks, and whole for one process.
  const std::string from = two.dir + "/step_000002";
  expect_close(one, train(3, "int8_on_three_z" + z, {"--moments", "int8", "--zero", z, "--resume", from}), false,
               kInt8Tolerance);
  expect_close(one, train(1, "int8_on_one_z" + z, {"--moments", "int8", "--resume", from}), false, kInt8Tolerance);
}

// The optimizer state in host memory (--offload optimizer, streamed in chunks): each rank streams its own slices.
TEST_P(DataParallelTraining, CombinesWithTheOptimizerOffload) {
  const std::string z = std::to_string(zero());
  const std::vector<std::string> offload = {"--offload", "optimizer", "--offload-chunk", "256"};
  const RunResult one = train(1, "offload_one_z" + z, offload);
  std::vector<std::string> ranks = offload;
  ranks.insert(ranks.end(), {"--zero", z});
  expect_close(one, train(2, "offload_two_z" + z, ranks));
  expect_close(one_process(), one);
}

// The gradients in host memory too (--offload optimizer,gradients): under ZeRO 2 and 3 each rank keeps its slice of
// them there, brought up into its chunk of the staging buffer before each unit's backward and taken down reduced
// after; bitwise the same run as with only the optimizer offloaded, and one process's within the tolerance. ZeRO 0
// and 1 keep every gradient on every rank: refused, naming the stages that offload them.
TEST_P(DataParallelTraining, OffloadsTheGradientSliceUnderZero2And3) {
  const std::string z = std::to_string(zero());
  const std::vector<std::string> both = {"--offload", "optimizer,gradients", "--offload-chunk", "256", "--zero", z};
  if (zero() < 2) {
    const std::string name = "grad_offload_refused_z" + z;
    std::vector<std::string> launcher = {TK_MPIEXEC, "-np", "2", "--oversubscribe"};
    TokamakChild child(train_args(name, both), dir_->path(name + ".output"), 0, launcher);
    const testing::ChildExit e = child.wait();
    EXPECT_TRUE(!e.signaled && e.code != 0) << child.out() << child.err();
    EXPECT_NE(child.err().find("ZeRO " + z + " has none"), std::string::npos) << child.err();
    EXPECT_NE(child.err().find("add --zero 2 or 3"), std::string::npos) << child.err();
    return;
  }
  const RunResult offloaded = train(2, "grad_offload_two_z" + z, both);
  const RunResult optimizer_only =
      train(2, "grad_offload_ref_two_z" + z, {"--offload", "optimizer", "--offload-chunk", "256", "--zero", z});
  EXPECT_EQ(optimizer_only.losses, offloaded.losses);
  EXPECT_EQ(optimizer_only.weights, offloaded.weights);
  expect_close(one_process(), offloaded);
  // Resharded on 3 ranks, still offloaded: the slices are a third each.
  expect_close(one_process(), train(3, "grad_offload_three_z" + z, both));
}

// `tokamak export` (one process) writes the weights of a sharded run's checkpoint as they are.
TEST_P(DataParallelTraining, ExportsTheCheckpointOfTwoRanks) {
  const std::string out = dir_->path("export_z" + std::to_string(zero()));
  TokamakChild child({"export", "--checkpoint", two_ranks().dir, "--out", out, "--dtype", "f32"}, out + ".output");
  const testing::ChildExit e = child.wait();
  ASSERT_TRUE(!e.signaled && e.code == 0) << child.out() << child.err();
  const std::unique_ptr<SafeTensorsFile> f = SafeTensorsFile::open(out + "/model.safetensors");
  ASSERT_FALSE(f->tensors().empty());
  for (const SafeTensorInfo& t : f->tensors()) EXPECT_EQ(f->read_f32(t.name), two_ranks().weights.at(t.name)) << t.name;
}

// What each rank allocates (run config.json's memory, rank 0's): AdamW's state whole under ZeRO 0, a slice of each
// unit under ZeRO 1, 2 and 3 (1/N, up to the units' padding to N x 256 elements); the parameters whole but under
// ZeRO 3, where each rank holds its slices only (the two units it gathers at a time are counted apart).
TEST_P(DataParallelTraining, EachRankHoldsItsShareOfTheShardedState) {
  auto bytes = [](const RunResult& r, const char* what) {
    return nlohmann::json::parse(read_bytes(r.dir + "/config.json")).at("memory").at(what).get<double>();
  };
  const RunResult& whole = one_process();
  const RunResult& two = two_ranks();
  auto expect_half = [](double part, double all) {
    EXPECT_GE(part, all / 2);
    EXPECT_LE(part, all / 2 * 1.1);
  };
  if (zero() == 0) EXPECT_EQ(bytes(two, "optimizer_bytes"), bytes(whole, "optimizer_bytes"));
  else expect_half(bytes(two, "optimizer_bytes"), bytes(whole, "optimizer_bytes"));
  if (zero() < 3) EXPECT_GE(bytes(two, "parameter_bytes"), bytes(whole, "parameter_bytes"));
  else expect_half(bytes(two, "parameter_bytes"), bytes(whole, "parameter_bytes"));
}

// Each step's record carries rank 0's communication and every rank's data wait, all finite and non-negative: the
// gradients' collectives took time, the compute waited for no more of them than there were nor longer than the step
// (MPI runs each collective and host gather on the thread that computes, so together they fit in the step), and the
// largest of each over the ranks is the one named. A run of one process logs none of it.
TEST_P(DataParallelTraining, LogsTheCommunicationAndEachRanksDataWait) {
  const std::vector<nlohmann::json> records = log_records(two_ranks());
  ASSERT_EQ(records.size(), 4u);
  for (const nlohmann::json& j : records) {
    SCOPED_TRACE(j.dump());
    for (const char* key : {"comm_s", "comm_exposed_s", "comm_host_s", "comm_max_s", "comm_exposed_max_s",
                            "data_wait_s", "data_wait_max_s"}) {
      ASSERT_TRUE(j.contains(key) && j.at(key).is_number()) << key;
      const double v = j.at(key).get<double>();
      EXPECT_TRUE(std::isfinite(v) && v >= 0) << key << " = " << v;
    }
    const double step = j.at("step_time_s"), comm = j.at("comm_s"), exposed = j.at("comm_exposed_s");
    EXPECT_GT(j.at("comm_collectives").get<int>(), 0);
    EXPECT_GT(comm, 0);
    EXPECT_LE(exposed, comm);
    EXPECT_LE(exposed, step);
    EXPECT_LE(comm + j.at("comm_host_s").get<double>(), step);
    EXPECT_GT(j.at("comm_host_s").get<double>(), 0) << "the loss is summed on the host every step";
    EXPECT_LE(j.at("comm_exposed_max_s").get<double>(), j.at("comm_max_s").get<double>());
    EXPECT_GE(j.at("comm_max_s").get<double>(), comm);
    for (const char* key : {"comm_max_rank", "comm_exposed_max_rank", "data_wait_max_rank"}) {
      const int rank = j.at(key);
      EXPECT_TRUE(rank == 0 || rank == 1) << key;
    }
    const std::vector<double> waits = j.at("data_wait_by_rank_s");
    ASSERT_EQ(waits.size(), 2u);
    for (double w : waits) EXPECT_TRUE(std::isfinite(w) && w >= 0);
    EXPECT_EQ(waits[0], j.at("data_wait_s").get<double>());
    const int slowest = j.at("data_wait_max_rank");
    EXPECT_EQ(waits[size_t(slowest)], j.at("data_wait_max_s").get<double>());
    EXPECT_EQ(waits[size_t(slowest)], std::max(waits[0], waits[1]));
  }
  for (const nlohmann::json& j : log_records(one_process()))
    for (const char* key : {"comm_s", "comm_exposed_s", "comm_host_s", "data_wait_max_s", "data_wait_by_rank_s"})
      EXPECT_FALSE(j.contains(key)) << key << " in a run of one process: " << j.dump();
}

// Rank 1 waits 100 ms longer for each batch (TOKAMAK_LOADER_DELAY_MS, an MPI launch of two app contexts): its data
// wait is the largest and named so, in the log and in the run's last lines, and rank 0 spends it waiting in the step's
// communication for rank 1.
TEST_P(DataParallelTraining, NamesTheRankThatWaitsForData) {
  const std::string name = "slow_rank1_z" + std::to_string(zero());
  const std::vector<std::string> args = train_args(name, {"--zero", std::to_string(zero())});
  std::vector<std::string> launcher = {TK_MPIEXEC, "-np", "1", "--oversubscribe", testing::kTokamak};
  launcher.insert(launcher.end(), args.begin(), args.end());
  launcher.insert(launcher.end(), {":", "-np", "1", "env", "TOKAMAK_LOADER_DELAY_MS=100"});
  const RunResult run = run_child(name, args, launcher);
  double rank1_wait = 0, rank0_waiting_in_communication = 0;
  for (const nlohmann::json& j : log_records(run)) {
    SCOPED_TRACE(j.dump());
    const std::vector<double> waits = j.at("data_wait_by_rank_s");
    ASSERT_EQ(waits.size(), 2u);
    EXPECT_EQ(j.at("data_wait_max_rank").get<int>(), 1);
    EXPECT_GT(waits[1], waits[0]);
    rank1_wait += waits[1];
    rank0_waiting_in_communication += j.at("comm_exposed_s").get<double>() + j.at("comm_host_s").get<double>();
  }
  EXPECT_GT(rank1_wait, 0.1);  // at least one read's delay in four steps of three reads each
  EXPECT_GE(rank0_waiting_in_communication, 0.5 * rank1_wait);
  const std::string out = read_bytes(dir_->path(name + ".output.out"));
  EXPECT_NE(out.find("communication over 4 steps: collectives"), std::string::npos) << out;
  EXPECT_NE(out.find("(rank 1, the slowest)"), std::string::npos) << out;
}

// The gradients' memory as the backend's ledger recorded it (rank 0's memory.json after the first step), with the
// 16-layer model (which 2 ranks also train as one process does): the whole [P] buffer under ZeRO 0 and 1; under ZeRO
// 2 and 3 the rank's half of it (the padded layout's P / 2 in f32) and the three unit-sized staging buffers of the
// backward, together well under the whole buffer.
TEST_P(DataParallelTraining, ZeroTwoAndThreeHoldASliceOfTheGradientsAndTheStaging) {
  struct Gradients {
    double accumulated = 0, staging = 0;
    std::string accumulated_label;
  };
  auto gradients = [](const RunResult& r) {
    Gradients g;
    const nlohmann::json table = nlohmann::json::parse(read_bytes(r.dir + "/memory.json"));
    for (const auto& row : table.at("rows")) {
      const std::string label = row.at("component");
      if (label.starts_with("parameter gradients")) {
        g.accumulated += row.at("bytes").get<double>();
        g.accumulated_label = label;
      }
      if (label.starts_with("gradient staging")) g.staging += row.at("bytes").get<double>();
    }
    return g;
  };
  auto config = [](const RunResult& r) { return nlohmann::json::parse(read_bytes(r.dir + "/config.json")); };
  const std::string z = std::to_string(zero());
  static const RunResult deep_one = train(1, "deep_one", {"--model", *deep_model_});
  const RunResult deep_two = train(2, "deep_two_z" + z, {"--model", *deep_model_, "--zero", z});
  expect_close(deep_one, deep_two);
  const Gradients whole = gradients(deep_one), two = gradients(deep_two);
  ASSERT_GT(whole.accumulated, 0);
  EXPECT_EQ(whole.staging, 0);
  EXPECT_EQ(two.accumulated + two.staging, config(deep_two).at("memory").at("gradient_bytes").get<double>());
  if (zero() < 2) {
    EXPECT_GE(two.accumulated, whole.accumulated);
    EXPECT_EQ(two.staging, 0);
    return;
  }
  const double padded = config(deep_two).at("parameters").get<double>();  // this run's layout, units padded
  EXPECT_EQ(two.accumulated_label, "parameter gradients (this rank's slice of each unit)");
  EXPECT_EQ(two.accumulated, padded / 2 * sizeof(float));
  EXPECT_GT(two.staging, 0);
  EXPECT_LT(two.staging, 0.25 * whole.accumulated);  // three units of a model of 18
  EXPECT_LT(two.accumulated + two.staging, 0.75 * whole.accumulated);
}

INSTANTIATE_TEST_SUITE_P(Zero, DataParallelTraining, ::testing::Values(0, 1, 2, 3));

}  // namespace
}  // namespace tk
