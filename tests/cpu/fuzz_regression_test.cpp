// What fuzzing the parsers found (tests/fuzz), one test a finding, each input also kept in the fuzz
// target's corpus. Every one was input that ended in an exception other than tk::Error, which the CLI
// reports as an "internal error" instead of a sentence naming the file.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "core/fs.h"
#include "data/text_input.h"
#include "data_testing.h"
#include "io/hf.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "train/checkpoint.h"

namespace tk {
namespace {

using testing::error_of;
using testing::TempDir;
using testing::write_text;

// nlohmann::json reports a number beyond a double's range (1e605) as out_of_range, not parse_error:
// each reader of a JSON file caught only parse_error, so such a number escaped as an internal error.
// (config_fuzz, safetensors_index_fuzz)
TEST(FuzzRegression, NumbersBeyondADoubleAreInvalidJsonInEveryFile) {
  TempDir dir;
  const std::string big = "1e605";

  write_text(dir.path("config.json"), R"({"architectures": ["LlamaForCausalLM"], "rope_theta": )" + big + "}");
  EXPECT_NE(error_of([&] { ModelConfig::resolve(dir.path("config.json")); }).find("config.json is not valid JSON"),
            std::string::npos);

  write_text(dir.path("model/model.safetensors.index.json"), R"({"weight_map": {}, "metadata": {"total_size": )" + big +
                                                                 "}}");
  ModelConfig cfg = ModelConfig::preset("tiny");
  EXPECT_NE(error_of([&] { load_params(cfg, ParamLayout::build(cfg), dir.path("model")); })
                .find("model.safetensors.index.json is not valid JSON"),
            std::string::npos);

  write_text(dir.path("ckpt/trainer_state.json"), R"({"step": )" + big + "}");
  EXPECT_NE(error_of([&] { read_trainer_state(dir.path("ckpt")); }).find("trainer_state.json is not valid JSON"),
            std::string::npos);

  const std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,)" + big + "]}}";
  const uint64_t n = header.size();
  std::string file(reinterpret_cast<const char*>(&n), 8);
  write_text(dir.path("w.safetensors"), file + header + "1234");
  EXPECT_NE(error_of([&] { SafeTensorsFile::open(dir.path("w.safetensors")); }).find("the header is not valid JSON"),
            std::string::npos);

  EXPECT_EQ(error_of([&] { json_document_text(R"({"text": "a", "score": )" + big + "}", "text", "in.jsonl", 7); }),
            "in.jsonl:7: not valid JSON: number overflow parsing '1e605'");
}

// The number of mappings of `path` in this process (/proc/self/maps).
int mappings_of(const std::string& path) {
  const std::string maps = fs::read_file("/proc/self/maps");
  int n = 0;
  for (size_t at = maps.find(path); at != std::string::npos; at = maps.find(path, at + 1)) n++;
  return n;
}

// A safetensors file whose header fails a check threw out of the reader's constructor, where no
// destructor runs: its memory mapping stayed behind, one more for every failed open, each slowing every
// later truncation of the file. (safetensors_fuzz: the executions per second fell as mappings piled up)
TEST(FuzzRegression, ARefusedSafetensorsFileLeavesNoMapping) {
  TempDir dir;
  const std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})";
  const uint64_t n = header.size();
  write_text(dir.path("bad.safetensors"), std::string(reinterpret_cast<const char*>(&n), 8) + header + "1234");
  for (int i = 0; i < 3; i++) EXPECT_THROW(SafeTensorsFile::open(dir.path("bad.safetensors")), Error);
  EXPECT_EQ(mappings_of(dir.path("bad.safetensors")), 0);
}

}  // namespace
}  // namespace tk
