// Hugging Face interop: weights of tiny Llama, Qwen2 (q/k/v bias) and Qwen3 (q/k norm) models load from
// one file or a sharded index into the flat layout, bad checkpoints fail naming the tensor and both
// shapes, and an export loads back to the same parameters, with a tokenizer transformers loads.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/fs.h"
#include "data/tokenizer.h"
#include "io/hf.h"
#include "io/safetensors.h"

namespace {

namespace stdfs = std::filesystem;
using json = nlohmann::json;

tk::ModelConfig tiny_config(tk::Arch arch) {
  tk::ModelConfig c;
  c.name = "tiny";
  c.arch = arch;
  c.vocab_size = 67;
  c.d_model = 16;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 4;
  c.ffn_dim = 24;
  c.max_seq = 64;
  c.rope_theta = 10000.0;
  c.norm_eps = 1e-6;
  c.tied_embeddings = arch == tk::Arch::Qwen2;
  c.qkv_bias = arch == tk::Arch::Qwen2;
  c.qk_norm = arch == tk::Arch::Qwen3;
  return c;
}

// Random values in every tensor; the alignment padding between tensors stays zero, as loading leaves it.
std::vector<float> random_params(const tk::ParamLayout& layout, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> p(size_t(layout.total), 0.f);
  for (const tk::ParamInfo& t : layout.params)
    for (int64_t i = 0; i < t.numel; i++) p[size_t(t.offset + i)] = dist(rng);
  return p;
}

double rel_err(const std::vector<float>& out, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); i++) {
    num += (double(out[i]) - ref[i]) * (double(out[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / den);
}

// The error message of f(), which must throw tk::Error.
template <class F> std::string error_of(F f) {
  try {
    f();
  } catch (const tk::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no tk::Error was thrown";
  return "";
}

class HfIoTest : public ::testing::TestWithParam<tk::Arch> {
 protected:
  void SetUp() override {
    std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char& c : test) c = c == '/' ? '_' : c;
    dir_ = stdfs::temp_directory_path() / ("tk_hf_io_" + std::to_string(::getpid()) + "_" + test);
    stdfs::remove_all(dir_);
    stdfs::create_directories(dir_ / "model");
    cfg_ = tiny_config(GetParam());
    layout_ = tk::ParamLayout::build(cfg_);
    params_ = random_params(layout_, 1000 + uint32_t(GetParam()));
  }
  void TearDown() override { stdfs::remove_all(dir_); }

  std::string model_dir() const { return (dir_ / "model").string(); }

  // The layout's tensors (all but `skip`) in one writer, as an HF checkpoint names them.
  tk::SafeTensorsWriter writer_for(const std::vector<float>& params, const std::string& skip = "") const {
    tk::SafeTensorsWriter w;
    for (const tk::ParamInfo& p : layout_.params)
      if (p.name != skip) w.add_f32(p.name, p.shape, params.data() + p.offset);
    return w;
  }

  // model.safetensors.index.json and `n` shards, tensors dealt round-robin.
  void write_sharded(int n) const {
    std::vector<tk::SafeTensorsWriter> shards(static_cast<size_t>(n));
    json index = {{"metadata", {{"total_size", layout_.total * 4}}}, {"weight_map", json::object()}};
    for (size_t i = 0; i < layout_.params.size(); i++) {
      const tk::ParamInfo& p = layout_.params[i];
      int s = int(i) % n;
      shards[size_t(s)].add_f32(p.name, p.shape, params_.data() + p.offset);
      index["weight_map"][p.name] = fmt::format("model-{:05}-of-{:05}.safetensors", s + 1, n);
    }
    for (int s = 0; s < n; s++)
      shards[size_t(s)].write(fmt::format("{}/model-{:05}-of-{:05}.safetensors", model_dir(), s + 1, n));
    tk::fs::write_file_atomic(model_dir() + "/model.safetensors.index.json", index.dump(2));
  }

  stdfs::path dir_;
  tk::ModelConfig cfg_;
  tk::ParamLayout layout_;
  std::vector<float> params_;
};

TEST_P(HfIoTest, LayoutHoldsTheArchitecturesTensors) {
  bool qwen2 = GetParam() == tk::Arch::Qwen2, qwen3 = GetParam() == tk::Arch::Qwen3;
  EXPECT_EQ(layout_.find("model.layers.1.self_attn.q_proj.bias") != nullptr, qwen2);
  EXPECT_EQ(layout_.find("model.layers.1.self_attn.k_norm.weight") != nullptr, qwen3);
  EXPECT_EQ(layout_.find("lm_head.weight") != nullptr, !cfg_.tied_embeddings);
}

TEST_P(HfIoTest, LoadsOneFileByDirectoryOrPath) {
  writer_for(params_).write(model_dir() + "/model.safetensors");
  EXPECT_EQ(tk::load_params(cfg_, layout_, model_dir()), params_);
  EXPECT_EQ(tk::load_params(cfg_, layout_, model_dir() + "/model.safetensors"), params_);
}

TEST_P(HfIoTest, LoadsShardedIndex) {
  write_sharded(3);
  EXPECT_EQ(tk::load_params(cfg_, layout_, model_dir()), params_);
  EXPECT_EQ(tk::load_params(cfg_, layout_, model_dir() + "/model.safetensors.index.json"), params_);
}

TEST_P(HfIoTest, IndexNamingTheWrongShardIsAnError) {
  write_sharded(2);
  json index = json::parse(tk::fs::read_file(model_dir() + "/model.safetensors.index.json"));
  const std::string name = "model.layers.0.mlp.gate_proj.weight";
  std::string shard = index["weight_map"][name].get<std::string>();
  index["weight_map"][name] = shard == "model-00001-of-00002.safetensors" ? "model-00002-of-00002.safetensors"
                                                                          : "model-00001-of-00002.safetensors";
  tk::fs::write_file_atomic(model_dir() + "/model.safetensors.index.json", index.dump());
  std::string msg = error_of([&] { tk::load_params(cfg_, layout_, model_dir()); });
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
}

// A weight_map entry that leads out of the model's directory (absolute, "..", a link to elsewhere) is
// refused before any file is opened: a downloaded index must not make tokamak read other files.
TEST_P(HfIoTest, IndexNamingAFileOutsideItsDirectoryIsRefused) {
  write_sharded(2);
  const std::string index_path = model_dir() + "/model.safetensors.index.json";
  const json index = json::parse(tk::fs::read_file(index_path));
  stdfs::copy_file(model_dir() + "/model-00001-of-00002.safetensors", (dir_ / "outside.safetensors").string());
  stdfs::create_symlink(dir_ / "outside.safetensors", dir_ / "model" / "link.safetensors");
  for (const char* file : {"/etc/passwd", "../outside.safetensors", "link.safetensors"}) {
    json bad = index;
    bad["weight_map"]["model.norm.weight"] = file;
    tk::fs::write_file_atomic(index_path, bad.dump());
    std::string msg = error_of([&] { tk::load_params(cfg_, layout_, model_dir()); });
    EXPECT_NE(msg.find(index_path + " names the file \"" + file + "\""), std::string::npos) << msg;
  }
}

// Files tokamak exports carry a checksum of every tensor; a flipped byte fails the load naming the tensor.
TEST_P(HfIoTest, ExportedWeightsAreChecksummed) {
  std::string out = (dir_ / "export").string();
  tk::export_hf(cfg_, layout_, params_, out, "bf16", "");
  const std::string file = out + "/model.safetensors";
  {
    const auto exported = tk::SafeTensorsFile::open(file);  // held while its tensors are read
    for (const tk::SafeTensorInfo& t : exported->tensors()) EXPECT_TRUE(t.checksum.has_value()) << t.name;
  }
  const size_t at = stdfs::file_size(file) - 3;
  std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
  io.seekg(std::streamoff(at));
  const char byte = char(io.get() ^ 0x04);
  io.seekp(std::streamoff(at));
  io.put(byte);
  io.close();
  const std::string last = layout_.params.back().name;
  std::string msg = error_of([&] { tk::load_params(cfg_, layout_, out); });
  EXPECT_NE(msg.find(file + ": tensor \"" + last + "\" is corrupt"), std::string::npos) << msg;
}

TEST_P(HfIoTest, LoadsBf16Weights) {
  tk::SafeTensorsWriter w;
  for (const tk::ParamInfo& p : layout_.params) w.add_f32_as_bf16(p.name, p.shape, params_.data() + p.offset);
  w.write(model_dir() + "/model.safetensors");
  auto loaded = tk::load_params(cfg_, layout_, model_dir());
  double err = rel_err(loaded, params_);
  EXPECT_GT(err, 0.0);      // the weights went through bf16...
  EXPECT_LT(err, 4e-3);     // ...and each lost at most half a bf16 ulp (2^-9 relative)
}

TEST_P(HfIoTest, MissingTensorIsNamed) {
  const std::string name = "model.layers.1.mlp.up_proj.weight";
  writer_for(params_, name).write(model_dir() + "/model.safetensors");
  std::string msg = error_of([&] { tk::load_params(cfg_, layout_, model_dir()); });
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  EXPECT_NE(msg.find("lacks 1 tensor"), std::string::npos) << msg;
}

TEST_P(HfIoTest, ShapeMismatchNamesTensorAndBothShapes) {
  // k_proj stored transposed: the same number of elements, the wrong shape.
  const std::string name = "model.layers.0.self_attn.k_proj.weight";
  tk::SafeTensorsWriter w = writer_for(params_, name);
  w.add_f32(name, {16, 8}, params_.data() + layout_.find(name)->offset);
  w.write(model_dir() + "/model.safetensors");
  std::string msg = error_of([&] { tk::load_params(cfg_, layout_, model_dir()); });
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  EXPECT_NE(msg.find("[16, 8]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[8, 16]"), std::string::npos) << msg;
}

TEST_P(HfIoTest, ExtraTensorsAreWarnedOnceAndATiedHeadIgnored) {
  tk::SafeTensorsWriter w = writer_for(params_);
  float inv_freq[2] = {1.f, 0.01f};
  w.add_f32("model.layers.0.self_attn.rotary_emb.inv_freq", {2}, inv_freq);
  w.add_f32("model.layers.1.self_attn.rotary_emb.inv_freq", {2}, inv_freq);
  if (cfg_.tied_embeddings) w.add_f32("lm_head.weight", {67, 16}, params_.data() + layout_.embed);
  w.write(model_dir() + "/model.safetensors");

  ::testing::internal::CaptureStderr();
  auto loaded = tk::load_params(cfg_, layout_, model_dir());
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(loaded, params_);
  size_t first = err.find("warning:");
  ASSERT_NE(first, std::string::npos) << err;
  EXPECT_EQ(err.find("warning:", first + 1), std::string::npos) << "warned more than once: " << err;
  EXPECT_NE(err.find("2 tensor(s)"), std::string::npos) << err;
  EXPECT_NE(err.find("model.layers.1.self_attn.rotary_emb.inv_freq"), std::string::npos) << err;
  EXPECT_EQ(err.find("lm_head"), std::string::npos) << err;
}

TEST_P(HfIoTest, ExportF32LoadsBackExactly) {
  std::string out = (dir_ / "export").string();
  tk::export_hf(cfg_, layout_, params_, out, "F32", "");
  EXPECT_EQ(tk::load_params(cfg_, layout_, out), params_);

  auto file = tk::SafeTensorsFile::open(out + "/model.safetensors");
  EXPECT_EQ(file->metadata().at("format"), "pt");
  EXPECT_EQ(file->tensors().size(), layout_.params.size());
  EXPECT_EQ(file->find("lm_head.weight") != nullptr, !cfg_.tied_embeddings);

  json j = json::parse(tk::fs::read_file(out + "/config.json"));
  EXPECT_EQ(j["torch_dtype"], "float32");
  tk::ModelConfig back = tk::load_hf_config(out);
  EXPECT_EQ(back.arch, cfg_.arch);
  EXPECT_EQ(back.vocab_size, cfg_.vocab_size);
  EXPECT_EQ(back.d_model, cfg_.d_model);
  EXPECT_EQ(back.n_layers, cfg_.n_layers);
  EXPECT_EQ(back.n_kv_heads, cfg_.n_kv_heads);
  EXPECT_EQ(back.head_dim, cfg_.head_dim);
  EXPECT_EQ(back.ffn_dim, cfg_.ffn_dim);
  EXPECT_EQ(back.tied_embeddings, cfg_.tied_embeddings);
  EXPECT_EQ(back.qkv_bias, cfg_.qkv_bias);
  EXPECT_EQ(back.qk_norm, cfg_.qk_norm);
  EXPECT_EQ(back.norm_eps, cfg_.norm_eps);
}

TEST_P(HfIoTest, ExportBf16RoundsEveryWeight) {
  std::string out = (dir_ / "export").string();
  tk::export_hf(cfg_, layout_, params_, out, "bf16", "");
  EXPECT_EQ(json::parse(tk::fs::read_file(out + "/config.json"))["torch_dtype"], "bfloat16");
  EXPECT_EQ(tk::SafeTensorsFile::open(out + "/model.safetensors")->tensors()[0].dtype, "BF16");
  double err = rel_err(tk::load_params(cfg_, layout_, out), params_);
  EXPECT_GT(err, 0.0);
  EXPECT_LT(err, 4e-3);
}

INSTANTIATE_TEST_SUITE_P(Archs, HfIoTest, ::testing::Values(tk::Arch::Llama, tk::Arch::Qwen2, tk::Arch::Qwen3),
                         [](const auto& info) { return std::string(tk::arch_name(info.param)); });

class HfExportDirTest : public HfIoTest {};

TEST_P(HfExportDirTest, CopiesTheTokenizerFiles) {
  stdfs::create_directories(dir_ / "tok");
  std::string tokenizer_json = R"({"model": {"type": "BPE", "vocab": {"a": 0}}})";
  tk::fs::write_file_atomic((dir_ / "tok/tokenizer.json").string(), tokenizer_json);
  tk::fs::write_file_atomic((dir_ / "tok/tokenizer_config.json").string(), "{}");
  tk::fs::write_file_atomic((dir_ / "tok/unrelated.txt").string(), "not a tokenizer file");
  std::string out = (dir_ / "export").string();
  tk::export_hf(cfg_, layout_, params_, out, "f32", (dir_ / "tok").string());
  EXPECT_EQ(tk::fs::read_file(out + "/tokenizer.json"), tokenizer_json);
  EXPECT_TRUE(stdfs::exists(out + "/tokenizer_config.json"));
  EXPECT_FALSE(stdfs::exists(out + "/unrelated.txt"));

  std::string msg = error_of([&] { tk::export_hf(cfg_, layout_, params_, out + "2", "f32", model_dir()); });
  EXPECT_NE(msg.find("no tokenizer files"), std::string::npos) << msg;
  EXPECT_FALSE(stdfs::exists(out + "2"));
}

// The chat template comes along: as chat_template.jinja and as tokenizer_config.json's chat_template, which every
// transformers version's apply_chat_template reads.
TEST_P(HfExportDirTest, WritesTheChatTemplateBack) {
  stdfs::create_directories(dir_ / "tok");
  const std::string tmpl = "{% for m in messages %}{{ m.content }}{% endfor %}";
  tk::fs::write_file_atomic((dir_ / "tok/tokenizer.json").string(), R"({"model": {"type": "BPE", "vocab": {"a": 0}}})");
  tk::fs::write_file_atomic((dir_ / "tok/tokenizer_config.json").string(), R"({"eos_token": "a"})");
  tk::fs::write_file_atomic((dir_ / "tok/chat_template.jinja").string(), tmpl);
  const std::string out = (dir_ / "export").string();
  tk::export_hf(cfg_, layout_, params_, out, "f32", (dir_ / "tok").string());
  EXPECT_EQ(tk::fs::read_file(out + "/chat_template.jinja"), tmpl);
  const auto config = nlohmann::json::parse(tk::fs::read_file(out + "/tokenizer_config.json"));
  EXPECT_EQ(config["chat_template"], tmpl);
  EXPECT_EQ(config["eos_token"], "a");
  // Named as a tokenizer.json, the template beside it comes too.
  tk::export_hf(cfg_, layout_, params_, out + "2", "f32", (dir_ / "tok/tokenizer.json").string());
  EXPECT_EQ(nlohmann::json::parse(tk::fs::read_file(out + "2/tokenizer_config.json"))["chat_template"], tmpl);
}

TEST_P(HfExportDirTest, RefusesANonEmptyDirectoryUnlessOverwriting) {
  std::string out = (dir_ / "export").string();
  stdfs::create_directories(out);
  tk::fs::write_file_atomic(out + "/notes.txt", "precious");
  std::string msg = error_of([&] { tk::export_hf(cfg_, layout_, params_, out, "f32", ""); });
  EXPECT_NE(msg.find("not empty"), std::string::npos) << msg;
  EXPECT_EQ(tk::fs::read_file(out + "/notes.txt"), "precious");
}

// --overwrite replaces an earlier export, and nothing else: not a directory of the user's, not one that holds
// the model being exported, not one that holds the current directory.
TEST_P(HfExportDirTest, OverwritesOnlyAnEarlierExport) {
  const std::string out = (dir_ / "export").string();
  tk::export_hf(cfg_, layout_, params_, out, "f32", "");
  EXPECT_TRUE(stdfs::exists(out + "/.tokamak-export"));
  std::vector<float> changed = params_;
  changed[0] += 1.f;
  tk::export_hf(cfg_, layout_, changed, out + "/", "f32", "", /*overwrite=*/true);
  EXPECT_EQ(tk::load_params(cfg_, layout_, out), changed);
  int entries = 0;  // the model dir and the export: no temporary or old directory left beside them
  for ([[maybe_unused]] const auto& e : stdfs::directory_iterator(dir_)) entries++;
  EXPECT_EQ(entries, 2);

  const std::string mine = (dir_ / "mine").string();
  stdfs::create_directories(mine);
  tk::fs::write_file_atomic(mine + "/notes.txt", "precious");
  std::string msg = error_of([&] { tk::export_hf(cfg_, layout_, params_, mine, "f32", "", true); });
  EXPECT_NE(msg.find("it is not an earlier export"), std::string::npos) << msg;
  EXPECT_EQ(tk::fs::read_file(mine + "/notes.txt"), "precious");

  // The model's own directory, and a directory above it, are never the output.
  writer_for(params_).write(model_dir() + "/model.safetensors");
  for (const std::string& target : {model_dir(), dir_.string(), model_dir() + "/.."}) {
    msg = error_of([&] { tk::export_hf(cfg_, layout_, params_, target, "f32", "", true, model_dir()); });
    EXPECT_NE(msg.find("it holds the model being exported"), std::string::npos) << target << ": " << msg;
  }
  // An earlier export that holds the current directory stays too.
  const stdfs::path cwd = stdfs::current_path();
  stdfs::create_directories(out + "/inside");
  stdfs::current_path(out + "/inside");
  msg = error_of([&] { tk::export_hf(cfg_, layout_, params_, out, "f32", "", true); });
  stdfs::current_path(cwd);
  EXPECT_NE(msg.find("it holds the current directory"), std::string::npos) << msg;
  EXPECT_TRUE(stdfs::exists(out + "/inside"));
  EXPECT_EQ(tk::load_params(cfg_, layout_, model_dir()), params_) << "the model directory is intact";
}

TEST_P(HfExportDirTest, WritesWhatTransformersReads) {
  stdfs::create_directories(dir_ / "tok");
  tk::fs::write_file_atomic((dir_ / "tok/tokenizer.json").string(), R"({"model": {"type": "BPE"}})");
  tk::fs::write_file_atomic((dir_ / "tok/tokenizer_config.json").string(),
                            R"({"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 2048})");
  cfg_.bos_id = 3, cfg_.eos_id = 5;
  const std::string out = (dir_ / "export").string();
  tk::export_hf(cfg_, layout_, params_, out, "bf16", (dir_ / "tok").string());
  const json config = json::parse(tk::fs::read_file(out + "/config.json"));
  EXPECT_EQ(config["torch_dtype"], "bfloat16");
  EXPECT_EQ(config["dtype"], "bfloat16");
  const json generation = json::parse(tk::fs::read_file(out + "/generation_config.json"));
  EXPECT_EQ(generation["bos_token_id"], 3);
  EXPECT_EQ(generation["eos_token_id"], 5);
  const json tokenizer = json::parse(tk::fs::read_file(out + "/tokenizer_config.json"));
  EXPECT_EQ(tokenizer["model_max_length"], cfg_.max_seq);
  EXPECT_EQ(tokenizer["tokenizer_class"], "PreTrainedTokenizerFast");
  EXPECT_EQ(json::parse(tk::fs::read_file((dir_ / "tok/tokenizer_config.json").string()))["model_max_length"], 2048)
      << "the source tokenizer is left as it was";

  // Named as a file (as prepare records it), a tokenizer.json brings the tokenizer_config.json beside it.
  tk::export_hf(cfg_, layout_, params_, out, "f32", (dir_ / "tok/tokenizer.json").string(), true);
  EXPECT_EQ(json::parse(tk::fs::read_file(out + "/tokenizer_config.json"))["model_max_length"], cfg_.max_seq);

  // A tokenizer.json alone gets a tokenizer_config.json that says how to load it, and how long inputs may be.
  stdfs::remove(dir_ / "tok/tokenizer_config.json");
  tk::export_hf(cfg_, layout_, params_, out, "f32", (dir_ / "tok").string(), true);
  const json made = json::parse(tk::fs::read_file(out + "/tokenizer_config.json"));
  EXPECT_EQ(made["tokenizer_class"], "PreTrainedTokenizerFast");
  EXPECT_EQ(made["model_max_length"], cfg_.max_seq);
  EXPECT_EQ(json::parse(tk::fs::read_file(out + "/config.json"))["dtype"], "float32");
}

// GPT-2's files (encoder.json, vocab.bpe) export with the tokenizer.json and tokenizer_config.json AutoTokenizer loads,
// a tokenizer.json that encodes and decodes as those files do; a vocabulary padded past the tokenizer's has the
// padding ids in generation_config.json's suppress_tokens.
TEST(HfExportTokenizer, GptTwoFilesGetTheTokenizerJsonTheyAmountTo) {
  const std::string gpt2 = std::string(TK_SOURCE_DIR) + "/.cache/gpt2";
  if (!stdfs::exists(gpt2 + "/vocab.bpe")) GTEST_SKIP() << "no GPT-2 tokenizer in .cache";
  const stdfs::path dir = stdfs::temp_directory_path() / ("tk_hf_export_gpt2_" + std::to_string(::getpid()));
  stdfs::remove_all(dir);
  tk::ModelConfig cfg = tiny_config(tk::Arch::Llama);
  cfg.vocab_size = 50304;
  cfg.bos_id = cfg.eos_id = 50256;
  const tk::ParamLayout layout = tk::ParamLayout::build(cfg);
  const std::string out = (dir / "export").string();
  tk::export_hf(cfg, layout, std::vector<float>(size_t(layout.total)), out, "bf16", gpt2);
  EXPECT_TRUE(stdfs::exists(out + "/encoder.json") && stdfs::exists(out + "/vocab.bpe"));
  const json config = json::parse(tk::fs::read_file(out + "/tokenizer_config.json"));
  EXPECT_EQ(config["tokenizer_class"], "PreTrainedTokenizerFast");
  EXPECT_EQ(config["eos_token"], "<|endoftext|>");
  EXPECT_EQ(config["model_max_length"], cfg.max_seq);
  const std::unique_ptr<tk::Tokenizer> files = tk::Tokenizer::load(gpt2);
  const std::unique_ptr<tk::Tokenizer> written = tk::Tokenizer::load(out + "/tokenizer.json");
  EXPECT_EQ(written->kind(), "hf-bpe");
  ASSERT_EQ(written->vocab_size(), files->vocab_size());
  EXPECT_EQ(written->eot_id(), files->eot_id());
  for (int32_t id = 0; id < files->vocab_size(); id++)
    ASSERT_EQ(written->decode({id}), files->decode({id})) << "id " << id;
  const std::string fixture = std::string(TK_SOURCE_DIR) + "/tests/fixtures/tokenizer/texts.json";
  const json texts = json::parse(tk::fs::read_file(fixture));
  for (const json& t : texts["texts"]) {
    const std::string text = t["text"].get<std::string>();
    EXPECT_EQ(written->encode(text, true), files->encode(text, true)) << t["name"];
  }
  json expected = json::array();
  for (int id = 50257; id < 50304; id++) expected.push_back(id);
  EXPECT_EQ(json::parse(tk::fs::read_file(out + "/generation_config.json"))["suppress_tokens"], expected);
  stdfs::remove_all(dir);
}

TEST_P(HfExportDirTest, RejectsAnUnknownDtype) {
  std::string msg = error_of([&] { tk::export_hf(cfg_, layout_, params_, (dir_ / "e").string(), "fp8", ""); });
  EXPECT_NE(msg.find("fp8"), std::string::npos) << msg;
  EXPECT_FALSE(stdfs::exists(dir_ / "e"));
}

INSTANTIATE_TEST_SUITE_P(Llama, HfExportDirTest, ::testing::Values(tk::Arch::Llama),
                         [](const auto& info) { return std::string(tk::arch_name(info.param)); });

}  // namespace
