// Helpers for the report tests: a real run directory from a few steps of CPU training (a model of
// 2 layers of width 32 on byte tokens: seconds), and readers of the SVG paths in a rendered page.
#pragma once
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "core/fs.h"
#include "data/prepare.h"
#include "data_testing.h"
#include "model/config.h"
#include "train/trainer.h"

namespace tk::testing {

// Documents of random words: a loss that falls, from a seeded generator.
inline std::string make_word_dataset(const TempDir& dir) {
  static const char* const kWords[] = {"the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "big", "red"};
  std::mt19937_64 rng(11);
  for (int d = 0; d < 16; d++) {
    std::string text;
    for (int w = 0; w < 100; w++) text += std::string(kWords[rng() % std::size(kWords)]) + (w % 9 == 8 ? ". " : " ");
    write_text(dir.path("text/doc" + std::to_string(d) + ".txt"), text);
  }
  PrepareOptions o;
  o.inputs = {dir.path("text")};
  o.out_dir = dir.path("data");
  o.val_fraction = 0.2;
  o.threads = 1;
  o.progress = false;
  prepare(ByteTokenizer(), o);
  return o.out_dir;
}

inline std::string write_tiny_model(const TempDir& dir) {
  ModelConfig c;
  c.name = "test-tiny";
  c.vocab_size = 257;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.ffn_dim = 64;
  c.max_seq = 64;
  const std::string path = dir.path("model.json");
  fs::write_file_atomic(path, c.to_hf_json().dump(2));
  return path;
}

// Trains `steps` steps on the CPU into dir/run, validating every `eval_every` steps; returns the run directory.
inline std::string train_cpu_run(const TempDir& dir, int steps, int eval_every) {
  TrainConfig c;
  c.model = write_tiny_model(dir);
  c.data = make_word_dataset(dir);
  c.out = dir.path("run");
  c.device = "cpu";
  c.batch = 2;
  c.seq = 16;
  c.steps = steps;
  c.lr = 3e-3;
  c.warmup = 2;
  c.eval_tokens = 64;
  c.eval_every = eval_every;
  Trainer(c).run();
  return c.out;
}

// The <svg id="ID"> element of a page ("" when there is none).
inline std::string svg_with_id(const std::string& html, const std::string& id) {
  const size_t at = html.find("<svg id=\"" + id + "\"");
  if (at == std::string::npos) return "";
  return html.substr(at, html.find("</svg>", at) + 6 - at);
}

// The d attribute of the series path named `series` in `svg` ("" when there is none).
inline std::string series_path(const std::string& svg, const std::string& series) {
  const size_t at = svg.find("data-series=\"" + series + "\"");
  if (at == std::string::npos) return "";
  const size_t d = svg.find(" d=\"", at) + 4;
  return svg.substr(d, svg.find('"', d) - d);
}

// Points drawn by a path: its M and L commands.
inline int path_points(const std::string& d) {
  int n = 0;
  for (char c : d) n += c == 'M' || c == 'L';
  return n;
}

inline int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) n++;
  return n;
}

}  // namespace tk::testing
