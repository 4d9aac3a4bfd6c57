// Hugging Face interop: weights found by their HF names in one safetensors file or a sharded index,
// checked against the config's shapes, into the flat parameter layout; and the reverse, an export
// directory (config.json, generation_config.json, model.safetensors, tokenizer files) that appears whole or not
// at all, and that replaces only what an earlier export wrote.
#include "io/hf.h"

#include <stdlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/confined_path.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/log.h"
#include "data/hf_tokenizer_writer.h"
#include "data/tokenizer.h"
#include "io/safetensors.h"

namespace tk {
namespace {

namespace stdfs = std::filesystem;
using json = nlohmann::json;

// Written into every export, last: the one kind of directory that --overwrite may replace.
constexpr const char* kExportMarker = ".tokamak-export";

const char* const kTokenizerFiles[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                       "vocab.json",     "merges.txt",            "encoder.json",
                                       "vocab.bpe",      "chat_template.jinja"};

std::string shape_str(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// "a, b, c and 12 more": names in a message, without flooding the terminal.
std::string some_names(const std::vector<std::string>& names, size_t shown = 5) {
  std::vector<std::string> head(names.begin(), names.begin() + std::min(shown, names.size()));
  std::string s = fmt::format("{}", fmt::join(head, ", "));
  if (names.size() > shown) s += fmt::format(" and {} more", names.size() - shown);
  return s;
}

json read_json(const std::string& path) {
  try {
    return json::parse(fs::read_file(path));
  } catch (const json::exception& e) {
    fail("{} is not valid JSON: {}", path, e.what());
  }
}

// The safetensors files holding a model and, for each tensor name, the file that holds it: one file,
// a directory with model.safetensors, or a sharded model.safetensors.index.json (its weight_map).
class TensorSource {
 public:
  explicit TensorSource(const std::string& path) {
    std::string index = sharded_index(path);
    if (!index.empty()) {
      open_shards(index);
    } else {
      std::string file = stdfs::is_directory(path) ? (stdfs::path(path) / "model.safetensors").string() : path;
      TK_CHECK(stdfs::exists(file), "{} holds no model.safetensors nor model.safetensors.index.json", path);
      add_file(file);
    }
  }

  struct Location {
    const SafeTensorsFile* file;
    const SafeTensorInfo* info;
  };
  const Location* find(const std::string& name) const {
    auto it = where_.find(name);
    return it == where_.end() ? nullptr : &it->second;
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [name, loc] : where_) out.push_back(name);
    return out;
  }
  const std::string& description() const { return description_; }

 private:
  static std::string sharded_index(const std::string& path) {
    if (stdfs::is_directory(path)) {
      auto index = stdfs::path(path) / "model.safetensors.index.json";
      return stdfs::exists(index) ? index.string() : "";
    }
    return path.ends_with(".index.json") ? path : "";
  }

  void add_file(const std::string& file) {
    description_ = file;
    files_.push_back(SafeTensorsFile::open(file));
    for (const SafeTensorInfo& t : files_.back()->tensors()) where_[t.name] = {files_.back().get(), &t};
  }

  // The index's weight_map is the authority: each tensor is taken from the shard it names, which must
  // lie in the index's directory.
  void open_shards(const std::string& index_path) {
    description_ = index_path;
    json index = read_json(index_path);
    TK_CHECK(index.is_object(), "{} is not a JSON object with a \"weight_map\"", index_path);
    auto map = index.find("weight_map");
    TK_CHECK(map != index.end() && map->is_object(), "{} has no \"weight_map\" object", index_path);
    const std::string dir = stdfs::path(index_path).parent_path().string();
    std::map<std::string, const SafeTensorsFile*> shards;
    for (const auto& [name, shard] : map->items()) {
      TK_CHECK(shard.is_string(), "{}: weight_map entry \"{}\" is not a file name", index_path, name);
      std::string file = path_inside(dir.empty() ? "." : dir, shard.get<std::string>(), index_path);
      if (!shards.count(file)) {
        files_.push_back(SafeTensorsFile::open(file));
        shards[file] = files_.back().get();
      }
      const SafeTensorInfo* info = shards[file]->find(name);
      TK_CHECK(info, "{} says tensor \"{}\" is in {}, but that file has no such tensor", index_path, name, file);
      where_[name] = {shards[file], info};
    }
  }

  std::string description_;
  std::vector<std::unique_ptr<SafeTensorsFile>> files_;
  std::map<std::string, Location> where_;
};

void check_all_present(const TensorSource& src, const ParamLayout& layout) {
  std::vector<std::string> missing;
  for (const ParamInfo& p : layout.params)
    if (!src.find(p.name)) missing.push_back(p.name);
  TK_CHECK(missing.empty(), "{} lacks {} tensor(s) that the model config needs: {}", src.description(),
           missing.size(), some_names(missing));
}

// One warning for all tensors the model will not use (rotary inv_freq buffers, a tied lm_head is
// silently ignored as Hugging Face itself does).
void warn_unused(const TensorSource& src, const ModelConfig& cfg, const ParamLayout& layout) {
  std::vector<std::string> unused;
  for (const std::string& name : src.names()) {
    bool tied_head = cfg.tied_embeddings && name == "lm_head.weight";
    if (!tied_head && !layout.find(name)) unused.push_back(name);
  }
  if (!unused.empty())
    log::warn("ignoring {} tensor(s) in {} that the model does not use: {}", unused.size(), src.description(),
              some_names(unused));
}

// "BF16" or "F32" from the spellings a user or a config might give.
std::string safetensors_dtype(const std::string& dtype) {
  std::string d = dtype;
  std::transform(d.begin(), d.end(), d.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (d == "bf16" || d == "bfloat16") return "BF16";
  if (d == "f32" || d == "fp32" || d == "float32") return "F32";
  fail("cannot export weights as \"{}\": choose bf16 or f32", dtype);
}

// An absolute path without a trailing slash, so that "<dir>.tmp-XXXXXX" is a sibling of dir. A symbolic link is
// followed: the export replaces the directory it names (the link stays, naming the new export), never the link.
stdfs::path directory_path(const std::string& dir) {
  stdfs::path p = stdfs::absolute(dir).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  std::error_code ec;
  if (!stdfs::is_symlink(p, ec)) return p;
  const stdfs::path target = stdfs::canonical(p, ec);
  TK_CHECK(!ec, "cannot export to {}: it is a symbolic link to {}, which does not exist", p.string(),
           stdfs::read_symlink(p, ec).string());
  return target;
}

// Whether `outer` is `inner` or one of the directories above it (symbolic links, "." and ".." resolved).
bool contains(const stdfs::path& outer, const stdfs::path& inner) {
  auto resolved = [](const stdfs::path& p) {
    stdfs::path r = stdfs::weakly_canonical(stdfs::absolute(p));
    return r.has_filename() ? r : r.parent_path();  // no empty last element from a trailing slash
  };
  const stdfs::path o = resolved(outer), i = resolved(inner);
  return std::mismatch(o.begin(), o.end(), i.begin(), i.end()).first == o.end();
}

// A new, empty directory beside `path`, named after it: the export is written there and renamed into place.
stdfs::path make_sibling_directory(const stdfs::path& path, const char* what) {
  std::string pattern = path.string() + "." + what + "-XXXXXX";
  TK_CHECK(::mkdtemp(pattern.data()) != nullptr, "cannot create a directory beside {}: {}", path.string(),
           std::strerror(errno));
  // mkdtemp makes it private (0700); an export is read like any directory the user makes.
  using stdfs::perms;
  std::error_code ignored;
  stdfs::permissions(pattern, perms::owner_all | perms::group_read | perms::group_exec | perms::others_read |
                                  perms::others_exec, ignored);
  return pattern;
}

// config.json says the weights' dtype twice: transformers 4.x reads torch_dtype, 5.x reads dtype.
void write_config(const ModelConfig& cfg, const std::string& st_dtype, const stdfs::path& dir) {
  json j = cfg.to_hf_json();
  j["torch_dtype"] = j["dtype"] = st_dtype == "BF16" ? "bfloat16" : "float32";
  fs::write_file_atomic((dir / "config.json").string(), j.dump(2) + "\n");
}

// What GenerationConfig.from_pretrained reads: the ids that start and end a sequence, and, for a vocabulary padded
// past its tokenizer's `tokens` (0: not known), the padding ids as suppress_tokens, which transformers' generate never
// picks, as tokamak's never does (model/generate.h SamplingOptions::vocab_limit).
void write_generation_config(const ModelConfig& cfg, int32_t tokens, const stdfs::path& dir) {
  json j = json::object();
  if (cfg.bos_id >= 0) j["bos_token_id"] = cfg.bos_id;
  if (cfg.eos_id >= 0) j["eos_token_id"] = cfg.eos_id;
  if (tokens > 0 && tokens < cfg.vocab_size) {
    json& padding = j["suppress_tokens"] = json::array();
    for (int32_t id = tokens; id < cfg.vocab_size; id++) padding.push_back(id);
  }
  fs::write_file_atomic((dir / "generation_config.json").string(), j.dump(2) + "\n");
}

// HF names and shapes; no lm_head.weight when tied (save_pretrained leaves it out too).
void write_weights(const ParamLayout& layout, const std::vector<float>& params, const std::string& st_dtype,
                   const stdfs::path& dir) {
  SafeTensorsWriter w;
  w.set_metadata("format", "pt");
  for (const ParamInfo& p : layout.params) {
    const float* src = params.data() + p.offset;
    if (st_dtype == "BF16")
      w.add_f32_as_bf16(p.name, p.shape, src);
    else
      w.add_borrowed(p.name, "F32", p.shape, src, size_t(p.numel) * sizeof(float));
  }
  w.write((dir / "model.safetensors").string());
}

// tokenizer_config.json's model_max_length is the longest input transformers' tokenizer lets through without a
// warning: the model's max_position_embeddings, not what the tokenizer was written with. A tokenizer.json
// without a tokenizer_config.json gets one, so that AutoTokenizer loads it as it is (PreTrainedTokenizerFast).
// A chat_template.jinja is also written into it as chat_template, which every transformers version reads.
void set_model_max_length(const ModelConfig& cfg, const stdfs::path& dir) {
  const stdfs::path path = dir / "tokenizer_config.json";
  json j;
  if (stdfs::exists(path)) {
    j = read_json(path.string());
    TK_CHECK(j.is_object(), "{} does not hold a JSON object", path.string());
  } else if (stdfs::exists(dir / "tokenizer.json")) {
    j = {{"tokenizer_class", "PreTrainedTokenizerFast"}};
  } else {
    return;
  }
  j["model_max_length"] = cfg.max_seq;
  if (stdfs::exists(dir / "chat_template.jinja") && !j.contains("chat_template"))
    j["chat_template"] = fs::read_file((dir / "chat_template.jinja").string());
  fs::write_file_atomic(path.string(), j.dump(2) + "\n");
}

// A tokenizer.json named alone comes with the files Hugging Face keeps beside it (tokenizer_config.json: its
// class and special tokens), as train-tokenizer writes them; any other file is copied alone.
void copy_tokenizer(const std::string& tokenizer, const stdfs::path& dir) {
  if (stdfs::is_regular_file(tokenizer)) {
    fs::write_file_atomic((dir / stdfs::path(tokenizer).filename()).string(), fs::read_file(tokenizer));
    if (stdfs::path(tokenizer).filename() != "tokenizer.json") return;
    for (const char* name : {"tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"}) {
      const stdfs::path beside = stdfs::path(tokenizer).parent_path() / name;
      if (stdfs::exists(beside)) fs::write_file_atomic((dir / name).string(), fs::read_file(beside.string()));
    }
    return;
  }
  TK_CHECK(stdfs::is_directory(tokenizer), "tokenizer path {} does not exist", tokenizer);
  int copied = 0;
  for (const char* name : kTokenizerFiles) {
    stdfs::path f = stdfs::path(tokenizer) / name;
    if (!stdfs::exists(f)) continue;
    fs::write_file_atomic((dir / name).string(), fs::read_file(f.string()));
    copied++;
  }
  TK_CHECK(copied > 0, "{} holds no tokenizer files (tokenizer.json, or encoder.json + vocab.bpe, ...)", tokenizer);
}

// The tokens of the tokenizer in `dir`, 0 for one tokamak does not read (an HF model's Unigram tokenizer.json, say,
// which the export copies as it is): its padding ids, if any, are then not known.
int32_t tokenizer_size(const stdfs::path& dir) {
  try {
    return Tokenizer::load(dir.string())->vocab_size();
  } catch (const Error& e) {
    log::debug("export: the tokenizer in {} is not one tokamak reads ({}): no suppress_tokens", dir.string(), e.what());
    return 0;
  }
}

// GPT-2's files alone (encoder.json, vocab.bpe) are no tokenizer AutoTokenizer loads: it wants a tokenizer.json (or a
// vocab.json and merges.txt), so the tokenizer.json and tokenizer_config.json those files amount to are written
// beside them (data/hf_tokenizer_writer.h).
void add_tokenizer_json(const ModelConfig& cfg, const stdfs::path& dir) {
  if (stdfs::exists(dir / "tokenizer.json") || !stdfs::exists(dir / "encoder.json") ||
      !stdfs::exists(dir / "vocab.bpe"))
    return;
  write_hf_tokenizer(read_gpt2_bpe((dir / "encoder.json").string(), (dir / "vocab.bpe").string()), dir.string(),
                     cfg.max_seq);
}

// The names an earlier export in `dir` wrote: those its marker lists, or, in a marker of a version that listed
// none, every name an export may write.
std::set<std::string> files_of_earlier_export(const stdfs::path& dir) {
  const json marker = json::parse(fs::read_file((dir / kExportMarker).string()), nullptr, false);
  std::set<std::string> names;
  if (marker.is_object() && marker.contains("files") && marker["files"].is_array()) {
    for (const json& f : marker["files"])
      if (f.is_string()) names.insert(f.get<std::string>());
  } else {
    names = {"config.json", "generation_config.json", "model.safetensors"};
    names.insert(std::begin(kTokenizerFiles), std::end(kTokenizerFiles));
  }
  names.insert(kExportMarker);
  return names;
}

// Moves what the user added to an earlier export at `out` (every entry it did not write) into the new one at `tmp`,
// so that replacing the export keeps them; returns their names. A name that both the user and the new export hold is
// refused first.
std::vector<std::string> carry_over_users_files(const stdfs::path& out, const stdfs::path& tmp) {
  const std::set<std::string> written = files_of_earlier_export(out);
  std::vector<stdfs::path> users;
  for (const auto& e : stdfs::directory_iterator(out))
    if (!written.count(e.path().filename().string())) users.push_back(e.path());
  for (const stdfs::path& p : users)
    TK_CHECK(!stdfs::exists(tmp / p.filename()),
             "refusing to overwrite {}: its {} was not written by the earlier export, and the new one writes a file "
             "of that name; move it elsewhere first",
             out.string(), p.filename().string());
  std::vector<std::string> carried;
  for (const stdfs::path& p : users) {
    stdfs::rename(p, tmp / p.filename());
    carried.push_back(p.filename().string());
  }
  return carried;
}

// Puts the finished temporary directory at `out`, replacing what was there (the caller checked that
// this is allowed). The old contents are moved aside first, and restored if the rename fails.
void replace_dir(const stdfs::path& tmp, const stdfs::path& out) {
  stdfs::path old;
  if (stdfs::exists(out)) {
    old = make_sibling_directory(out, "old");
    std::error_code ec;
    stdfs::rename(out, old, ec);
    if (ec) {
      stdfs::remove(old, ec);  // still empty: nothing is left beside the export
      fail("cannot replace {}: {}", out.string(), ec.message());
    }
  }
  try {
    stdfs::rename(tmp, out);
  } catch (...) {
    if (!old.empty()) stdfs::rename(old, out);
    throw;
  }
  if (!old.empty()) stdfs::remove_all(old);
}

}  // namespace

std::vector<float> load_params(const ModelConfig& cfg, const ParamLayout& layout, const std::string& path) {
  TK_CHECK(stdfs::exists(path), "cannot load weights: {} does not exist", path);
  TensorSource src(path);
  check_all_present(src, layout);
  std::vector<float> params(size_t(layout.total));
  for (const ParamInfo& p : layout.params) {
    const auto* loc = src.find(p.name);
    TK_CHECK(loc->info->shape == p.shape, "{}: tensor \"{}\" has shape {} but the model config expects {}",
             loc->file->path(), p.name, shape_str(loc->info->shape), shape_str(p.shape));
    loc->file->read_f32(*loc->info, params.data() + p.offset);
  }
  warn_unused(src, cfg, layout);
  return params;
}

void check_export_dir(const std::string& out_dir, bool overwrite, const std::string& source_dir) {
  const stdfs::path out = directory_path(out_dir);
  if (!source_dir.empty())
    TK_CHECK(!contains(out, source_dir), "refusing to export to {}: it holds the model being exported ({})",
             out.string(), source_dir);
  if (!stdfs::exists(out)) return;
  TK_CHECK(stdfs::is_directory(out), "cannot export to {}: it exists and is not a directory", out.string());
  TK_CHECK(!contains(out, stdfs::current_path()),
           "refusing to export to {}: it holds the current directory ({})", out.string(),
           stdfs::current_path().string());
  if (stdfs::is_empty(out)) return;
  TK_CHECK(overwrite, "refusing to export to {}: the directory is not empty (--overwrite replaces an earlier export)",
           out.string());
  TK_CHECK(stdfs::exists(out / kExportMarker),
           "refusing to overwrite {}: it is not an earlier export (it has no {}, which tokamak export writes); "
           "name a new or empty directory",
           out.string(), kExportMarker);
}

ModelConfig load_hf_config(const std::string& dir) {
  std::string path = (stdfs::path(dir) / "config.json").string();
  TK_CHECK(stdfs::exists(path), "{} has no config.json: expected a Hugging Face model directory or a tokamak checkpoint",
           dir);
  return ModelConfig::from_hf_json(read_json(path), path);
}

void export_hf(const ModelConfig& cfg, const ParamLayout& layout, const std::vector<float>& params,
               const std::string& out_dir, const std::string& dtype, const std::string& tokenizer_dir,
               bool overwrite, const std::string& source_dir) {
  TK_CHECK(int64_t(params.size()) == layout.total, "export: {} parameter values given, the layout holds {}",
           params.size(), layout.total);
  std::string st_dtype = safetensors_dtype(dtype);
  check_export_dir(out_dir, overwrite, source_dir);
  stdfs::path out = directory_path(out_dir);
  std::error_code ec;
  stdfs::create_directories(out.parent_path(), ec);
  TK_CHECK(!ec, "cannot export to {}: cannot create {}: {}", out.string(), out.parent_path().string(), ec.message());
  stdfs::path tmp = make_sibling_directory(out, "tmp");
  try {
    write_config(cfg, st_dtype, tmp);
    write_weights(layout, params, st_dtype, tmp);
    int32_t tokens = 0;
    if (!tokenizer_dir.empty()) {
      copy_tokenizer(tokenizer_dir, tmp);
      add_tokenizer_json(cfg, tmp);
      set_model_max_length(cfg, tmp);
      tokens = tokenizer_size(tmp);
    }
    write_generation_config(cfg, tokens, tmp);
    json files = json::array();
    for (const auto& e : stdfs::directory_iterator(tmp)) files.push_back(e.path().filename().string());
    std::sort(files.begin(), files.end());
    const json marker = {{"written_by", "tokamak export"}, {"source", source_dir}, {"files", files}};
    fs::write_file_atomic((tmp / kExportMarker).string(), marker.dump(2) + "\n");
    std::vector<std::string> carried;
    if (stdfs::exists(out / kExportMarker)) carried = carry_over_users_files(out, tmp);
    try {
      replace_dir(tmp, out);
    } catch (...) {
      std::error_code ignored;  // the earlier export is back at out: its user's files go back into it
      for (const std::string& name : carried) stdfs::rename(tmp / name, out / name, ignored);
      throw;
    }
  } catch (const stdfs::filesystem_error& e) {
    std::error_code ignored;
    stdfs::remove_all(tmp, ignored);
    fail("cannot export to {}: {}", out.string(), e.what());
  } catch (...) {
    std::error_code ignored;
    stdfs::remove_all(tmp, ignored);
    throw;
  }
}

}  // namespace tk
