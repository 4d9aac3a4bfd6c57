// A checkpoint's tensor files are verified when it is loaded: every tensor's bytes against the checksum
// written with them, and every weight and optimizer moment finite. A flipped byte in model.safetensors
// or optimizer.safetensors, or a NaN saved into one, is an error naming the file and the tensor, never
// a resumed run (or eval, or generate) on silently wrong numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data_testing.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "model_testing.h"
#include "ops/cpu/cpu_ops.h"
#include "optim/optimizer.h"
#include "train/checkpoint.h"

namespace tk {
namespace {

using testing::error_of;
using testing::TempDir;

// A model, its optimizer and the checkpoint of them at step 3.
class CheckpointIntegrityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_.init_params(5);
    TrainerState state;
    state.step = 3;
    std::filesystem::create_directories(dir_.path("run"));
    checkpoint_ = save_checkpoint(dir_.path("run"), model_, optimizer_, state, 0);
  }

  // Loads the checkpoint into a fresh model and optimizer; returns the error message, "" when it loads.
  std::string load() {
    Model model(cfg_, *ops_, {1, 8});
    AdamW optimizer(model, {});
    try {
      load_checkpoint(checkpoint_, model, optimizer);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  // Flips one bit of the byte `from_end` bytes before the end of `file` (inside its last tensor).
  void flip_byte(const std::string& file, size_t from_end) {
    const std::string path = checkpoint_ + "/" + file;
    const size_t at = std::filesystem::file_size(path) - from_end;
    std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(std::streamoff(at));
    const char byte = char(io.get() ^ 0x10);
    io.seekp(std::streamoff(at));
    io.put(byte);
  }

  // Rewrites `file` with the value at element `index` of tensor `name` replaced (checksums recomputed,
  // as a run that diverged before saving would have written them).
  void rewrite_with(const std::string& file, const std::string& name, size_t index, float value) {
    const std::string path = checkpoint_ + "/" + file;
    auto in = SafeTensorsFile::open(path);
    SafeTensorsWriter w;
    std::vector<std::vector<float>> keep;
    for (const SafeTensorInfo& t : in->tensors()) {
      keep.push_back(in->read_f32(t.name));
      if (t.name == name) keep.back()[index] = value;
      w.add_f32(t.name, t.shape, keep.back().data());
    }
    w.write(path);
  }

  TempDir dir_;
  ModelConfig cfg_ = testing::tiny_llama_config();
  std::unique_ptr<Ops> ops_ = make_cpu_ops(DType::F32);
  Model model_{cfg_, *ops_, {1, 8}};
  AdamW optimizer_{model_, {}};
  std::string checkpoint_;
};

TEST_F(CheckpointIntegrityTest, AnIntactCheckpointLoads) {
  EXPECT_EQ(load(), "");
  auto f = SafeTensorsFile::open(checkpoint_ + "/model.safetensors");
  for (const SafeTensorInfo& t : f->tensors()) EXPECT_TRUE(t.checksum.has_value()) << t.name;
  f = SafeTensorsFile::open(checkpoint_ + "/optimizer.safetensors");
  for (const SafeTensorInfo& t : f->tensors()) EXPECT_TRUE(t.checksum.has_value()) << t.name;
}

TEST_F(CheckpointIntegrityTest, AFlippedByteInTheWeightsIsNamed) {
  flip_byte("model.safetensors", 6);
  const std::string msg = load();
  EXPECT_NE(msg.find(checkpoint_ + "/model.safetensors: tensor \"model.norm.weight\" is corrupt"), std::string::npos)
      << msg;
}

TEST_F(CheckpointIntegrityTest, AFlippedByteInTheOptimizerStateIsNamed) {
  flip_byte("optimizer.safetensors", 6);
  const std::string msg = load();
  EXPECT_NE(msg.find(checkpoint_ + "/optimizer.safetensors: tensor \"exp_avg_sq.model.norm.weight\" is corrupt"),
            std::string::npos)
      << msg;
}

TEST_F(CheckpointIntegrityTest, NonFiniteWeightsOrMomentsAreRefused) {
  rewrite_with("model.safetensors", "model.layers.1.mlp.up_proj.weight", 17, std::numeric_limits<float>::quiet_NaN());
  std::string msg = load();
  EXPECT_NE(msg.find("tensor \"model.layers.1.mlp.up_proj.weight\" holds NaN at element 17"), std::string::npos) << msg;

  SetUp();  // a fresh checkpoint
  rewrite_with("optimizer.safetensors", "exp_avg.model.embed_tokens.weight", 3, INFINITY);
  msg = load();
  EXPECT_NE(msg.find("tensor \"exp_avg.model.embed_tokens.weight\" holds an infinity at element 3"), std::string::npos)
      << msg;
}

// trainer_state.json and config.json are checksummed in complete.json: an edit that keeps a file's size (renaming
// "lr", next_batch 2 -> 7, a digit of the model's config) used to resume at the default learning rate or on other
// data; now reading the checkpoint is an error naming the file. A checkpoint of the version before checksums
// (format 2: complete.json with sizes only) still loads; one of format 3 whose complete.json lost its checksums does
// not.
TEST_F(CheckpointIntegrityTest, EditedJsonFilesAreRefused) {
  TrainerState state;
  state.step = 3;
  state.train_config = {{"lr", 0.003}, {"batch", 2}};
  state.loader = {{"next_batch", 2}, {"epoch", 0}};
  checkpoint_ = save_checkpoint(dir_.path("run"), model_, optimizer_, state, 0);
  const std::string trainer_state = checkpoint_ + "/trainer_state.json", config = checkpoint_ + "/config.json";
  const std::string saved_state = testing::read_text(trainer_state), saved_config = testing::read_text(config);
  ASSERT_EQ(load(), "");
  auto edit = [&](const std::string& path, const std::string& text, const std::string& from, const std::string& to) {
    std::string edited = text;
    ASSERT_NE(edited.find(from), std::string::npos) << from;
    edited.replace(edited.find(from), from.size(), to);
    testing::write_text(path, edited);
  };
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"\"lr\"", "\"lx\""},
                                 {"\"next_batch\": 2", "\"next_batch\": 7"}}) {
    SCOPED_TRACE(from);
    edit(trainer_state, saved_state, from, to);
    const std::string changed = trainer_state + " was changed after its checkpoint was saved";
    EXPECT_NE(error_of([&] { read_trainer_state(checkpoint_); }).find(changed), std::string::npos);
    EXPECT_NE(error_of([&] { resolve_checkpoint(dir_.path("run")); }).find(changed), std::string::npos);
    EXPECT_NE(error_of([&] { resolve_checkpoint(checkpoint_); }).find(changed), std::string::npos);
    EXPECT_NE(load().find(changed), std::string::npos);
  }
  testing::write_text(trainer_state, saved_state);
  edit(config, saved_config, "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1");
  EXPECT_NE(error_of([&] { resolve_checkpoint(dir_.path("run")); }).find(config + " was changed"), std::string::npos);
  testing::write_text(config, saved_config);
  EXPECT_EQ(resolve_checkpoint(dir_.path("run")), checkpoint_);

  // The version before: checkpoint_format 2, complete.json without checksums (its sizes made to agree).
  nlohmann::json old_state = nlohmann::json::parse(saved_state), marker =
      nlohmann::json::parse(testing::read_text(checkpoint_ + "/complete.json"));
  old_state["checkpoint_format"] = 2;
  testing::write_text(trainer_state, old_state.dump(2) + "\n");
  marker.erase("fnv1a64");
  marker["files"]["trainer_state.json"] = std::filesystem::file_size(trainer_state);
  testing::write_text(checkpoint_ + "/complete.json", marker.dump(2) + "\n");
  EXPECT_EQ(load(), "");
  EXPECT_EQ(resolve_checkpoint(dir_.path("run")), checkpoint_);
  // The same complete.json beside a trainer state of format 3: its checksums were taken away.
  testing::write_text(trainer_state, saved_state);
  marker["files"]["trainer_state.json"] = std::filesystem::file_size(trainer_state);
  testing::write_text(checkpoint_ + "/complete.json", marker.dump(2) + "\n");
  EXPECT_NE(load().find("complete.json records no checksums of the checkpoint's JSON files, which a checkpoint of "
                        "format 3 does"),
            std::string::npos);
}

TEST(TrainerStateJson, IntegersAndTheFingerprintAreChecked) {
  TrainerState s;
  s.step = 12;
  s.tokens_seen = 4096;
  s.tokenizer_fingerprint = 0x0123456789abcdefull;
  const nlohmann::json good = s.to_json();
  EXPECT_EQ(TrainerState::from_json(good, "t.json").step, 12);
  struct Case {
    const char* pointer;
    nlohmann::json value;
    const char* says;
  };
  const Case cases[] = {
      {"/step", 1.5, "t.json: step is 1.5, not an integer"},
      {"/step", -4, "t.json: step is -4; it must be an integer from 0"},
      {"/tokens_seen", 18446744073709551615ull, "t.json: tokens_seen is 18446744073709551615"},
      {"/tokenizer/fingerprint", "0123456789abcdeZ", "t.json: tokenizer.fingerprint \"0123456789abcdeZ\" is not 16"},
      {"/tokenizer/fingerprint", "12", "t.json: tokenizer.fingerprint \"12\" is not 16"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = good;
    j[nlohmann::json::json_pointer(c.pointer)] = c.value;
    const std::string msg = error_of([&] { TrainerState::from_json(j, "t.json"); });
    EXPECT_EQ(msg.find(c.says), 0u) << c.pointer << ": " << msg;
  }
}

}  // namespace
}  // namespace tk
