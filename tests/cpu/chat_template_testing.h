// Helpers for the chat template tests: rendering a batch of cases with jinja2 as transformers configures it
// (tests/cpu/chat_template_reference.py, run by Debian's python3 with python3-jinja2) and with tokamak, each
// result as {"text", "generation"} or {"error"}.
#pragma once
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/fs.h"
#include "data/chat_template/chat_template.h"
#include "data_testing.h"

namespace tk::testing {

using ojson = nlohmann::ordered_json;

struct TemplateCase {
  std::string source;
  ojson variables = ojson::object();  // besides messages (default []), tools (none) and add_generation_prompt
};

// The variables both renderers see, as apply_chat_template passes them.
inline ojson full_variables(const TemplateCase& c) {
  ojson v = c.variables;
  if (!v.contains("messages")) v["messages"] = ojson::array();
  if (!v.contains("tools")) v["tools"] = nullptr;
  if (!v.contains("add_generation_prompt")) v["add_generation_prompt"] = false;
  v["documents"] = nullptr;
  return v;
}

constexpr int64_t kFixedNow = 1721952000;  // 2024-07-26 00:00 UTC: what strftime_now reads in both renderers

inline std::string reference_python() {
  return std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
}

// jinja2's results for every case, from one run of the reference script.
inline std::vector<ojson> jinja2_results(const std::vector<TemplateCase>& cases) {
  TempDir dir;
  ojson list = ojson::array();
  for (const TemplateCase& c : cases) list.push_back({{"template", c.source}, {"variables", full_variables(c)}, {"now", kFixedNow}});
  fs::write_file_atomic(dir.path("cases.json"), list.dump());
  const std::string cmd = reference_python() + " " + TK_SOURCE_DIR + "/tests/cpu/chat_template_reference.py " +
                          dir.path("cases.json") + " > " + dir.path("out.json") + " 2> " + dir.path("err.txt");
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    ADD_FAILURE() << "the jinja2 reference did not run (" << cmd << "): " << fs::read_file(dir.path("err.txt"))
                  << "\ninstall python3-jinja2 (scripts/setup.sh installs it for scripts/test.sh)";
    return std::vector<ojson>(cases.size(), ojson{{"error", "reference missing"}});
  }
  const ojson out = ojson::parse(fs::read_file(dir.path("out.json")));
  return std::vector<ojson>(out.begin(), out.end());
}

inline ojson tokamak_result(const TemplateCase& c) {
  try {
    ChatTemplate t(c.source, "case");
    ChatInputs in;
    ojson vars = c.variables;
    if (vars.contains("messages")) in.messages = vars["messages"], vars.erase("messages");
    if (vars.contains("tools")) in.tools = vars["tools"], vars.erase("tools");
    if (vars.contains("add_generation_prompt")) in.add_generation_prompt = vars["add_generation_prompt"], vars.erase("add_generation_prompt");
    in.variables = vars;
    in.now = std::time_t(kFixedNow);
    const RenderedChat r = t.render(in);
    ojson spans = ojson::array();
    for (const auto& [b, e] : r.generation) spans.push_back({b, e});
    return {{"text", r.text}, {"generation", spans}};
  } catch (const Error& e) {
    return {{"error", e.what()}};
  }
}

// Every case renders byte for byte as jinja2 renders it, with the same generation spans, or fails where jinja2 fails.
// Returns how many rendered (not failed) in both.
inline int expect_same_as_jinja2(const std::vector<TemplateCase>& cases) {
  const std::vector<ojson> want = jinja2_results(cases);
  int rendered = 0;
  for (size_t i = 0; i < cases.size(); i++) {
    const ojson got = tokamak_result(cases[i]);
    const std::string where = "case " + std::to_string(i) + ": " + cases[i].source.substr(0, 300) + "\nwith " +
                              full_variables(cases[i]).dump().substr(0, 600);
    if (want[i].contains("error")) {
      EXPECT_TRUE(got.contains("error")) << where << "\njinja2 fails (" << want[i]["error"] << ") but tokamak printed "
                                         << got.dump();
      continue;
    }
    if (got.contains("error")) {
      ADD_FAILURE() << where << "\ntokamak fails: " << got["error"] << "\njinja2 printed " << want[i]["text"].dump();
      continue;
    }
    EXPECT_EQ(got["text"].get<std::string>(), want[i]["text"].get<std::string>()) << where;
    EXPECT_EQ(got["generation"], want[i]["generation"]) << where;
    rendered++;
  }
  return rendered;
}

}  // namespace tk::testing
