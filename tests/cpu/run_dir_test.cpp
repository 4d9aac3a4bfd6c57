// The run directory's lock (one writer at a time, the holder named from a record that is checked before it
// is repeated, nothing left behind by a run that wrote nothing), and what only a separate tokamak process
// shows: train and profile refused while another process holds the directory, a file size limit (ulimit -f)
// reported as a write error with the file's name instead of ending the process silently, eval, generate and
// export reading complete checkpoints only, and a run keeping the copy of its tokenizer they read.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"
#include "data/bpe_trainer.h"
#include "data/hf_tokenizer_writer.h"
#include "data/tokenizer.h"
#include "profile/profile_report.h"
#include "run_testing.h"
#include "train/checkpoint.h"
#include "train/checkpoint_checksums.h"
#include "train/run_dir.h"

namespace tk {
namespace {

namespace stdfs = std::filesystem;
using testing::error_of;
using testing::TempDir;

std::string host_name() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

// The pid of a process that has ended (and been reaped): no process of that id runs now.
pid_t pid_of_an_ended_process() {
  char arg0[] = "/bin/true";
  char* argv[] = {arg0, nullptr};
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, argv[0], nullptr, nullptr, argv, environ), 0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

TEST(RunDirLock, ASecondHolderIsRefusedByNameUntilTheFirstLetsGo) {
  TempDir dir;
  const std::string run = dir.path("run");
  {
    const RunDirLock first(run);
    const std::string msg = error_of([&] { RunDirLock second(run); });
    EXPECT_NE(msg.find(run + " is in use by another process"), std::string::npos) << msg;
    EXPECT_NE(msg.find(fmt::format("pid {} on {}", ::getpid(), host_name())), std::string::npos) << msg;
    EXPECT_NE(msg.find("run_dir_test"), std::string::npos) << msg;  // the holder's command line
    EXPECT_EQ(msg.find("no such process"), std::string::npos) << msg;
  }
  const RunDirLock again(run);
}

// The record is the holder's claim: one naming a process that does not run here, or none at all, is not repeated
// as the holder's name.
TEST(RunDirLock, ARecordNamingNoLiveProcessIsNotTakenForTheHolder) {
  TempDir dir;
  const std::string run = dir.path("run");
  const RunDirLock held(run);
  const std::string lock_file = run + "/" + RunDirLock::kFileName;
  testing::write_text(lock_file, fmt::format(R"({{"pid":{},"host":"{}","command":"tokamak train"}})",
                                             pid_of_an_ended_process(), host_name()));
  std::string msg = error_of([&] { RunDirLock second(run); });
  EXPECT_NE(msg.find("no such process runs here"), std::string::npos) << msg;
  testing::write_text(lock_file, "");
  msg = error_of([&] { RunDirLock second(run); });
  EXPECT_NE(msg.find("has not recorded itself"), std::string::npos) << msg;
}

// A lock that created the directory removes it again when nothing else was written there (a run refused before
// it wrote anything leaves no directory); in a directory that holds more, the lock file stays, its record cleared.
TEST(RunDirLock, LeavesNoDirectoryForARunThatWroteNothing) {
  TempDir dir;
  { const RunDirLock lock(dir.path("fresh")); }
  EXPECT_FALSE(stdfs::exists(dir.path("fresh")));
  {
    const RunDirLock lock(dir.path("used"));
    testing::write_text(dir.path("used/config.json"), "{}");
  }
  EXPECT_TRUE(stdfs::exists(dir.path("used/config.json")));
  EXPECT_EQ(testing::read_text(dir.path("used/.lock")), "");
}

// RUN/.lock is written (the holder's record) and emptied when the holder ends: a symbolic link there made train
// overwrite the file it named and empty it at exit. A link is not followed, and a FIFO, a directory or a second name
// (hard link) of another file is refused; the file named stays as it was.
TEST(RunDirLock, ALockFileThatIsALinkOrNotARegularFileIsRefusedAndLeftAlone) {
  TempDir dir;
  const std::string run = dir.path("run"), lock_file = run + "/" + RunDirLock::kFileName;
  testing::write_text(dir.path("notes.txt"), "the user's own words\n");
  stdfs::create_directories(run);
  stdfs::create_symlink(dir.path("notes.txt"), lock_file);
  std::string msg = error_of([&] { RunDirLock lock(run); });
  EXPECT_NE(msg.find(lock_file + " is a symbolic link"), std::string::npos) << msg;
  EXPECT_EQ(testing::read_text(dir.path("notes.txt")), "the user's own words\n");
  EXPECT_TRUE(stdfs::is_symlink(lock_file));

  stdfs::remove(lock_file);
  stdfs::create_hard_link(dir.path("notes.txt"), lock_file);
  msg = error_of([&] { RunDirLock lock(run); });
  EXPECT_NE(msg.find(lock_file + " cannot be the run directory's lock file: it has 2 names"), std::string::npos)
      << msg;
  EXPECT_EQ(testing::read_text(dir.path("notes.txt")), "the user's own words\n");

  stdfs::remove(lock_file);
  ASSERT_EQ(::mkfifo(lock_file.c_str(), 0644), 0);
  msg = error_of([&] { RunDirLock lock(run); });  // at once: opening the FIFO waits for no writer
  EXPECT_NE(msg.find(lock_file + " cannot be the run directory's lock file: it is not a regular file"),
            std::string::npos)
      << msg;
  stdfs::remove(lock_file);
  stdfs::create_directories(lock_file);
  EXPECT_NE(error_of([&] { RunDirLock lock(run); }).find(lock_file), std::string::npos);
  stdfs::remove(lock_file);
  { const RunDirLock lock(run); }  // a lock file of its own, then
}

class RunDirCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!stdfs::exists(testing::kTokamak)) GTEST_SKIP() << testing::kTokamak << " is not built";
    data_ = testing::make_byte_dataset(dir_);
    model_ = testing::write_model_config(dir_, testing::tiny_llama_config());
  }
  std::vector<std::string> train_args(const std::string& out) const {
    return {"train", "--model", model_, "--data", data_, "--out", out, "--device", "cpu", "--batch", "2", "--seq",
            "16", "--steps", "3", "--warmup", "1", "--eval-tokens", "0"};
  }

  TempDir dir_;
  std::string data_, model_;
};

// Another process holds the directory: `tokamak train` (fresh, with --overwrite, or resuming) and `tokamak profile`
// stop at once, exit 1, and name it; nothing in the directory changes.
TEST_F(RunDirCli, TrainAndProfileRefuseADirectoryAnotherProcessHolds) {
  const std::string run = dir_.path("run");
  ASSERT_EQ(testing::run_tokamak(train_args(run), dir_.path("first")).code, 0);
  const std::string log = testing::read_text(run + "/log.jsonl");
  const RunDirLock held(run);
  std::vector<std::string> overwrite = train_args(run), resume = {"train", "--resume", run, "--steps", "6"};
  overwrite.push_back("--overwrite");
  const std::vector<std::string> profile = {"profile", "--model", model_, "--data", data_, "--out", run, "--device",
                                            "cpu", "--batch", "2", "--seq", "16"};
  for (const auto& args : {overwrite, resume, profile}) {
    std::string err;
    const testing::ChildExit e = testing::run_tokamak(args, dir_.path("second"), &err);
    EXPECT_FALSE(e.signaled);
    EXPECT_EQ(e.code, 1) << err;
    EXPECT_NE(err.find("is in use by another process: pid " + std::to_string(::getpid())), std::string::npos) << err;
  }
  EXPECT_EQ(testing::read_text(run + "/log.jsonl"), log);
  EXPECT_TRUE(stdfs::exists(run + "/step_000003/complete.json"));
}

// The same through the binary: `tokamak train` refuses a run directory whose .lock is a link to a user's file, exit
// 1 naming it, and the file keeps its bytes (it used to be overwritten with the holder's record, then emptied).
TEST_F(RunDirCli, TrainRefusesALockFileThatIsASymbolicLink) {
  const std::string run = dir_.path("run");
  testing::write_text(dir_.path("notes.txt"), "the user's own words\n");
  stdfs::create_directories(run);
  stdfs::create_symlink(dir_.path("notes.txt"), run + "/.lock");
  std::string err;
  const testing::ChildExit e = testing::run_tokamak(train_args(run), dir_.path("linked"), &err);
  EXPECT_FALSE(e.signaled);
  EXPECT_EQ(e.code, 1) << err;
  EXPECT_NE(err.find(run + "/.lock is a symbolic link"), std::string::npos) << err;
  EXPECT_EQ(testing::read_text(dir_.path("notes.txt")), "the user's own words\n");
  EXPECT_FALSE(stdfs::exists(run + "/log.jsonl"));
}

// --overwrite replaces a run, never a directory that no run made: on a Hugging Face model's directory it deleted
// the model's config.json (`--model m --out m --overwrite`). Each run directory carries a marker; one of an earlier
// version, without it, is told by its config.json (a run's record, which a model's config.json is not).
TEST_F(RunDirCli, OverwriteReplacesOnlyADirectoryARunMade) {
  const std::string hf = dir_.path("hf");
  const std::string model_config = testing::tiny_llama_config().to_hf_json().dump(2);
  testing::write_text(hf + "/config.json", model_config);
  testing::write_text(hf + "/model.safetensors", "weights");
  testing::write_text(hf + "/README.md", "a model card");
  for (const bool overwrite : {true, false}) {
    std::vector<std::string> args = train_args(hf);
    if (overwrite) args.push_back("--overwrite");
    std::string err;
    const testing::ChildExit e = testing::run_tokamak(args, dir_.path("hf-run"), &err);
    EXPECT_EQ(e.code, 1) << err;
    EXPECT_NE(err.find(hf + " is not a run directory: it holds config.json, which a run would replace, but no "
                            ".tokamak-run"),
              std::string::npos)
        << err;
    EXPECT_EQ(err.find("--overwrite replaces only a run's directory") != std::string::npos, overwrite) << err;
    EXPECT_EQ(testing::read_text(hf + "/config.json"), model_config);
    EXPECT_EQ(testing::read_text(hf + "/model.safetensors"), "weights");
    EXPECT_FALSE(stdfs::exists(hf + "/log.jsonl"));
    EXPECT_FALSE(stdfs::exists(hf + "/.tokamak-run"));
  }

  const std::string run = dir_.path("run");
  std::vector<std::string> args = train_args(run);
  args.push_back("--overwrite");
  ASSERT_EQ(testing::run_tokamak(args, dir_.path("first")).code, 0);
  EXPECT_TRUE(stdfs::is_regular_file(run + "/.tokamak-run"));
  std::string err;
  EXPECT_EQ(testing::run_tokamak(args, dir_.path("again"), &err).code, 0) << err;
  stdfs::remove(run + "/.tokamak-run");  // as a run of an earlier version left it
  EXPECT_EQ(testing::run_tokamak(args, dir_.path("earlier"), &err).code, 0) << err;
  EXPECT_TRUE(stdfs::is_regular_file(run + "/.tokamak-run"));
}

// Under `ulimit -f` a write past the limit used to end tokamak with SIGXFSZ and no word; it is now a write error:
// exit 1, the file and the cause named, and a failed checkpoint leaves nothing half written.
TEST_F(RunDirCli, AFileSizeLimitIsAWriteErrorNamingTheFile) {
  struct Case {
    rlim_t limit;
    const char* file;
  };
  // config.json is ~2 KB; model.safetensors ~108 KB, optimizer.safetensors twice that.
  for (const Case& k : {Case{1024, "/config.json"}, Case{150 << 10, "/optimizer.safetensors"}}) {
    const std::string run = dir_.path(fmt::format("limit{}", k.limit));
    std::string err;
    const testing::ChildExit e = testing::run_tokamak(train_args(run), dir_.path("limited"), &err, k.limit);
    EXPECT_FALSE(e.signaled) << "killed by signal " << e.code;
    EXPECT_EQ(e.code, 1) << err;
    EXPECT_NE(err.find(k.file), std::string::npos) << err;
    EXPECT_NE(err.find("File too large (the file size limit was reached)"), std::string::npos) << err;
    if (stdfs::exists(run))
      for (const auto& entry : stdfs::directory_iterator(run))
        EXPECT_EQ(entry.path().filename().string().rfind(".tmp", 0), std::string::npos) << entry.path();
  }
}

// eval, generate and export take a run's latest complete checkpoint, naming an incomplete newer one they pass
// over, and refuse an incomplete checkpoint named on the command line.
TEST_F(RunDirCli, EvalGenerateAndExportUseOnlyCompleteCheckpoints) {
  const std::string run = dir_.path("run");
  std::vector<std::string> args = train_args(run);
  for (const char* a : {"--save-every", "1", "--keep-checkpoints", "0"}) args.push_back(a);
  ASSERT_EQ(testing::run_tokamak(args, dir_.path("train")).code, 0);
  stdfs::remove(run + "/step_000003/complete.json");  // a save cut short

  std::string err;
  const std::vector<std::string> export_run = {"export", "--checkpoint", run, "--out", dir_.path("hf")};
  EXPECT_EQ(testing::run_tokamak(export_run, dir_.path("export"), &err).code, 0) << err;
  EXPECT_NE(err.find("ignoring " + run + "/step_000003"), std::string::npos) << err;
  EXPECT_NE(err.find("exported " + run + "/step_000002"), std::string::npos) << err;

  const std::string incomplete = run + "/step_000003";
  const std::vector<std::vector<std::string>> commands = {
      {"export", "--checkpoint", incomplete, "--out", dir_.path("hf3")},
      {"eval", "--model", incomplete, "--data", data_, "--device", "cpu"},
      {"generate", "--model", incomplete, "--prompt", "a", "--device", "cpu"}};
  for (const auto& command : commands) {
    const testing::ChildExit e = testing::run_tokamak(command, dir_.path("read"), &err);
    EXPECT_EQ(e.code, 1) << command[0] << ": " << err;
    EXPECT_NE(err.find(incomplete + " is not a complete checkpoint (complete.json is missing"), std::string::npos)
        << command[0] << ": " << err;
  }
}

// A byte-level BPE of its own in DIR/tok (tokenizer.json and tokenizer_config.json, as train-tokenizer writes them:
// the 256 bytes, one merge and <|endoftext|>, 258 tokens) and a dataset prepared with it in DIR/tok-data, whose
// meta.json records DIR/tok.
std::string make_tokenizer_dataset(const TempDir& dir) {
  TrainedBpe bpe;
  for (int b = 0; b < 256; b++) bpe.tokens.push_back(std::string(1, char(b)));
  bpe.tokens.push_back("th");
  bpe.merges = {{int32_t('t'), int32_t('h')}};
  bpe.special_tokens = {"<|endoftext|>"};
  write_hf_tokenizer(bpe, dir.path("tok"), 64);
  std::mt19937_64 rng(3);
  for (int d = 0; d < 12; d++) testing::write_text(dir.path("tok-text/doc" + std::to_string(d) + ".txt"),
                                                   testing::random_document(rng, 120));
  PrepareOptions o;
  o.inputs = {dir.path("tok-text")};
  o.out_dir = dir.path("tok-data");
  o.tokenizer_path = dir.path("tok");
  o.val_fraction = 0.2;
  o.threads = 1;
  o.progress = false;
  prepare(*Tokenizer::load(dir.path("tok")), o);
  return o.out_dir;
}

// The run copies its tokenizer into RUN/tokenizer and its checkpoints name that copy ("../tokenizer"): with the
// original moved away, generate and export read the copy, and a resumed run keeps it. A checkpoint of an earlier run,
// which recorded the tokenizer by its absolute path, still finds it there.
TEST_F(RunDirCli, ARunKeepsItsTokenizerWhereverTheOriginalGoes) {
  const std::string data = make_tokenizer_dataset(dir_), run = dir_.path("run");
  const std::string model = testing::write_model_config(dir_, testing::tiny_llama_config(320), "model320.json");
  std::vector<std::string> args = {"train", "--model", model, "--data", data, "--out", run, "--device", "cpu",
                                   "--batch", "2", "--seq", "16", "--steps", "2", "--warmup", "1",
                                   "--eval-tokens", "0"};
  std::string err;
  ASSERT_EQ(testing::run_tokamak(args, dir_.path("train"), &err).code, 0) << err;
  EXPECT_TRUE(stdfs::exists(run + "/tokenizer/tokenizer.json"));
  EXPECT_TRUE(stdfs::exists(run + "/tokenizer/tokenizer_config.json"));
  EXPECT_EQ(read_trainer_state(run + "/step_000002").tokenizer_path, "../tokenizer");
  EXPECT_EQ(checkpoint_tokenizer(run + "/step_000002"), run + "/tokenizer");

  stdfs::rename(dir_.path("tok"), dir_.path("tok-moved"));
  const std::vector<std::string> generate = {"generate", "--model", run, "--prompt", "the", "--max-new-tokens", "4",
                                             "--device", "cpu"};
  EXPECT_EQ(testing::run_tokamak(generate, dir_.path("generate"), &err).code, 0) << err;
  EXPECT_EQ(testing::run_tokamak({"export", "--checkpoint", run, "--out", dir_.path("hf")}, dir_.path("export"), &err)
                .code,
            0)
      << err;
  EXPECT_EQ(err.find("is gone"), std::string::npos) << err;
  EXPECT_TRUE(stdfs::exists(dir_.path("hf/tokenizer.json")));

  args[14] = "3";  // --steps 3, resumed
  args.push_back("--resume");
  ASSERT_EQ(testing::run_tokamak(args, dir_.path("resume"), &err).code, 0) << err;
  EXPECT_NE(err.find("its copy in " + run + "/tokenizer is kept"), std::string::npos) << err;
  EXPECT_EQ(read_trainer_state(run + "/step_000003").tokenizer_path, "../tokenizer");

  // An earlier run's record: the absolute path of the tokenizer.
  const std::string state = run + "/step_000003/trainer_state.json";
  nlohmann::json j = nlohmann::json::parse(testing::read_text(state));
  j["tokenizer"]["path"] = dir_.path("tok-moved");
  testing::write_text(state, j.dump());
  const std::string marker = run + "/step_000003/complete.json";  // what the checkpoint's sizes are now
  nlohmann::json complete = nlohmann::json::parse(testing::read_text(marker));
  complete["files"]["trainer_state.json"] = stdfs::file_size(state);
  complete["fnv1a64"] = json_file_checksums(run + "/step_000003");  // as it would have been saved
  testing::write_text(marker, complete.dump());
  stdfs::remove_all(run + "/tokenizer");
  EXPECT_EQ(checkpoint_tokenizer(run + "/step_000003"), dir_.path("tok-moved"));
  EXPECT_EQ(testing::run_tokamak(generate, dir_.path("generate"), &err).code, 0) << err;
}

// The profile's files, when they cannot be written, are named in the error like every other file of a run.
TEST(RunDirFiles, AProfileThatCannotBeWrittenNamesItsFile) {
  TempDir dir;
  stdfs::create_directories(dir.path("run/profile.json"));
  const std::string msg = error_of([&] { write_profile(ProfileReport{}, dir.path("run")); });
  EXPECT_NE(msg.find(dir.path("run/profile.json")), std::string::npos) << msg;
}

}  // namespace
}  // namespace tk
