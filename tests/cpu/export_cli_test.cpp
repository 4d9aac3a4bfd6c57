// `tokamak export` end to end, the built binary on a run directory made here: which model --checkpoint names
// (a run's latest checkpoint, RUN/latest, one checkpoint, a Hugging Face directory) and says so, what the
// export holds, and that --overwrite never deletes the source, the current directory or a user's files.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/fs.h"
#include "io/hf.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"

namespace {

namespace stdfs = std::filesystem;
using json = nlohmann::json;

const std::string kTokamak = std::string(TK_BINARY_DIR) + "/tokamak";

struct Output {
  int status;
  std::string out, err;
};

tk::ModelConfig small_llama() {
  tk::ModelConfig c;
  c.name = "export-test";
  c.vocab_size = 67, c.d_model = 16, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 4;
  c.ffn_dim = 24, c.max_seq = 96, c.bos_id = 1, c.eos_id = 2;
  c.rope_scaling = tk::RopeScaling::llama3(8.0, 1.0, 4.0, 32);
  return c;
}

class ExportCli : public testing::Test {
 protected:
  void SetUp() override {
    if (!stdfs::exists(kTokamak)) GTEST_SKIP() << kTokamak << " is not built";
    dir_ = stdfs::temp_directory_path() / ("tk_export_cli_" + std::to_string(::getpid()) + "_" +
                                           testing::UnitTest::GetInstance()->current_test_info()->name());
    stdfs::remove_all(dir_);
    stdfs::create_directories(dir_ / "tok");
    stdfs::create_directories(dir_ / "run");
    tk::fs::write_file_atomic(path("tok/tokenizer.json"), R"({"model": {"type": "BPE"}})");
    tk::fs::write_file_atomic(path("tok/tokenizer_config.json"), R"({"model_max_length": 2048})");
    // A run directory as the trainer leaves it: its own config.json (not a model's), and two checkpoints.
    tk::fs::write_file_atomic(path("run/config.json"), R"({"model": "export-test", "steps": 3})");
    for (int step : {1, 3}) write_checkpoint(path("run/" + tk::checkpoint_dir_name(step)), step);
  }
  void TearDown() override {
    if (!dir_.empty()) stdfs::remove_all(dir_);
  }

  std::string path(const std::string& rel) const { return (dir_ / rel).string(); }

  // Weights that differ by step: the export shows which checkpoint it took.
  static std::vector<float> params_of(int step) {
    const tk::ParamLayout layout = tk::ParamLayout::build(small_llama());
    std::vector<float> p(size_t(layout.total), 0.f);
    std::mt19937 rng{uint32_t(step)};
    std::normal_distribution<float> normal;
    for (const tk::ParamInfo& t : layout.params)
      for (int64_t i = 0; i < t.numel; i++) p[size_t(t.offset + i)] = normal(rng);
    return p;
  }

  void write_checkpoint(const std::string& dir, int step) const {
    const tk::ModelConfig cfg = small_llama();
    const tk::ParamLayout layout = tk::ParamLayout::build(cfg);
    const std::vector<float> params = params_of(step);
    stdfs::create_directories(dir);
    tk::fs::write_file_atomic(dir + "/config.json", cfg.to_hf_json().dump(2));
    tk::SafeTensorsWriter w;
    for (const tk::ParamInfo& p : layout.params) w.add_f32(p.name, p.shape, params.data() + p.offset);
    w.write(dir + "/model.safetensors");
    tk::SafeTensorsWriter().write(dir + "/optimizer.safetensors");  // without it a checkpoint is not complete
    tk::TrainerState state;
    state.step = step;
    state.tokenizer_path = path("tok");
    tk::fs::write_file_atomic(dir + "/trainer_state.json", state.to_json().dump(2));
  }

  // `tokamak export ARGS`, run in `cwd` (default: the test's directory).
  Output export_(const std::string& args, const std::string& cwd = "") const {
    const std::string out = path("stdout"), err = path("stderr");
    const std::string cmd = "cd '" + (cwd.empty() ? dir_.string() : cwd) + "' && " + kTokamak + " export " + args +
                            " > '" + out + "' 2> '" + err + "'";
    const int status = std::system(cmd.c_str());
    return {WEXITSTATUS(status), tk::fs::read_file(out), tk::fs::read_file(err)};
  }

  std::vector<float> exported(const std::string& dir) const {
    const tk::ModelConfig cfg = small_llama();
    return tk::load_params(cfg, tk::ParamLayout::build(cfg), dir);
  }

  stdfs::path dir_;
};

TEST_F(ExportCli, ARunDirectoryExportsItsLatestCheckpoint) {
  Output r = export_("--checkpoint run --out hf/run --dtype f32");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("exporting the latest checkpoint of run run: run/step_000003"), std::string::npos) << r.err;
  EXPECT_EQ(exported(path("hf/run")), params_of(3));

  r = export_("--checkpoint run/latest --out hf/latest --dtype f32");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("the latest checkpoint of run run: run/step_000003"), std::string::npos) << r.err;
  EXPECT_EQ(exported(path("hf/latest")), params_of(3));

  r = export_("--checkpoint run/step_000001 --out hf/one --dtype f32");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("exporting checkpoint run/step_000001"), std::string::npos) << r.err;
  EXPECT_EQ(exported(path("hf/one")), params_of(1));

  // An export is itself a Hugging Face directory that can be exported again.
  r = export_("--checkpoint hf/one --out hf/again --dtype f32");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("exporting the Hugging Face model directory hf/one"), std::string::npos) << r.err;
  EXPECT_EQ(exported(path("hf/again")), params_of(1));

  r = export_("--checkpoint tok --out hf/none");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("is neither a checkpoint, a run directory"), std::string::npos) << r.err;
}

TEST_F(ExportCli, TheExportHoldsWhatTransformersReads) {
  Output r = export_("--checkpoint run --out hf");
  ASSERT_EQ(r.status, 0) << r.err;
  const json config = json::parse(tk::fs::read_file(path("hf/config.json")));
  EXPECT_EQ(config["torch_dtype"], "bfloat16");
  EXPECT_EQ(config["dtype"], "bfloat16");
  EXPECT_EQ(config["rope_scaling"]["rope_type"], "llama3");
  const json generation = json::parse(tk::fs::read_file(path("hf/generation_config.json")));
  EXPECT_EQ(generation["bos_token_id"], 1);
  EXPECT_EQ(generation["eos_token_id"], 2);
  const json tokenizer = json::parse(tk::fs::read_file(path("hf/tokenizer_config.json")));
  EXPECT_EQ(tokenizer["model_max_length"], 96);
  EXPECT_TRUE(stdfs::exists(path("hf/tokenizer.json")));
}

// The case that removed a checkpoint, a file and the current directory: --out .. from inside the run.
TEST_F(ExportCli, OverwriteNeverDeletesTheSourceTheCwdOrAUsersFiles) {
  stdfs::create_directories(path("run/work"));
  tk::fs::write_file_atomic(path("run/work/notes.txt"), "precious");
  Output r = export_("--checkpoint ../step_000003 --out .. --overwrite", path("run/work"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("it holds the model being exported"), std::string::npos) << r.err;
  r = export_("--checkpoint " + path("run") + " --out . --overwrite", path("run/work"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("it holds the current directory"), std::string::npos) << r.err;
  r = export_("--checkpoint run --out run/work --overwrite");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("it is not an earlier export"), std::string::npos) << r.err;
  EXPECT_EQ(tk::fs::read_file(path("run/work/notes.txt")), "precious");
  EXPECT_TRUE(tk::is_checkpoint(path("run/step_000003")));
  EXPECT_TRUE(stdfs::exists(path("run/config.json")));

  // An earlier export is replaced.
  ASSERT_EQ(export_("--checkpoint run/step_000001 --out hf --dtype f32").status, 0);
  r = export_("--checkpoint run --out hf --dtype f32");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("not empty"), std::string::npos) << r.err;
  r = export_("--checkpoint run --out hf --dtype f32 --overwrite");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(exported(path("hf")), params_of(3));
  for (const auto& e : stdfs::directory_iterator(dir_))  // no temporary directory left beside it
    EXPECT_EQ(e.path().filename().string().find("hf."), std::string::npos) << e.path();
}

// --overwrite replaces what the earlier export wrote and keeps what its user added there: it deleted a model card and
// a folder of notes. An export of a version whose marker lists no files is told by the names an export writes.
TEST_F(ExportCli, OverwriteKeepsWhatTheUserAddedToAnEarlierExport) {
  ASSERT_EQ(export_("--checkpoint run/step_000001 --out hf --dtype f32").status, 0);
  tk::fs::write_file_atomic(path("hf/README.md"), "a model card");
  stdfs::create_directories(path("hf/notes"));
  tk::fs::write_file_atomic(path("hf/notes/eval.txt"), "scores");
  Output r = export_("--checkpoint run --out hf --dtype f32 --overwrite");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(exported(path("hf")), params_of(3));
  EXPECT_EQ(tk::fs::read_file(path("hf/README.md")), "a model card");
  EXPECT_EQ(tk::fs::read_file(path("hf/notes/eval.txt")), "scores");

  tk::fs::write_file_atomic(path("hf/.tokamak-export"), R"({"written_by": "tokamak export", "source": ""})");
  r = export_("--checkpoint run/step_000001 --out hf --dtype f32 --overwrite");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(exported(path("hf")), params_of(1));
  EXPECT_EQ(tk::fs::read_file(path("hf/README.md")), "a model card");
  EXPECT_EQ(tk::fs::read_file(path("hf/notes/eval.txt")), "scores");
  const json marker = json::parse(tk::fs::read_file(path("hf/.tokamak-export")));
  EXPECT_EQ(marker["files"], json({"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                                   "tokenizer_config.json"}));
  for (const auto& e : stdfs::directory_iterator(dir_))  // no temporary or old directory left beside it
    EXPECT_EQ(e.path().filename().string().find("hf."), std::string::npos) << e.path();
}

// --out a symbolic link to an earlier export: the export replaces the directory it names, and the link stays (it
// failed, leaving an empty hf.old-XXXXXX beside the link). A link to nothing is refused, leaving nothing.
TEST_F(ExportCli, OutMayBeASymbolicLinkToAnEarlierExport) {
  ASSERT_EQ(export_("--checkpoint run/step_000001 --out hf --dtype f32").status, 0);
  stdfs::create_directory_symlink(path("hf"), path("current"));
  const Output r = export_("--checkpoint run --out current --dtype f32 --overwrite");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(stdfs::is_symlink(path("current")));
  EXPECT_EQ(exported(path("hf")), params_of(3));
  stdfs::create_directory_symlink(path("absent"), path("dangling"));
  const Output dangling = export_("--checkpoint run --out dangling --dtype f32");
  EXPECT_EQ(dangling.status, 1);
  EXPECT_NE(dangling.err.find("it is a symbolic link to " + path("absent") + ", which does not exist"),
            std::string::npos)
      << dangling.err;
  for (const auto& e : stdfs::directory_iterator(dir_)) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(name.find(".old-") == std::string::npos && name.find(".tmp-") == std::string::npos) << e.path();
  }
}

// An export inside a checkpoint is deleted with it when the run prunes; one named as a checkpoint of the run would be
// taken for one. Both are refused, and the checkpoint is left as it was.
TEST_F(ExportCli, RefusesToExportIntoACheckpoint) {
  for (const char* out : {"run/step_000003/hf", "run/step_000003", "run/step_000005"}) {
    const Output r = export_(std::string("--checkpoint run/step_000001 --out ") + out + " --overwrite");
    EXPECT_EQ(r.status, 1) << out;
    EXPECT_NE(r.err.find(std::string("refusing to export to ") + out), std::string::npos) << r.err;
  }
  EXPECT_FALSE(stdfs::exists(path("run/step_000003/hf")));
  EXPECT_FALSE(stdfs::exists(path("run/step_000005")));
  EXPECT_TRUE(tk::is_checkpoint(path("run/step_000003")));
  EXPECT_EQ(export_("--checkpoint run/step_000001 --out run/export --dtype f32").status, 0);  // beside them: fine
}

}  // namespace
