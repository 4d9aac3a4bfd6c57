// The step-time breakdown (a stacked bar by op category, the category and op tables, the advice),
// the memory plan table with its bar, and the config tables. Every string from a file is escaped.
#include "report/report_sections.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "core/format.h"
#include "report/svg_chart.h"

namespace tk::report {
namespace {

using json = nlohmann::json;

constexpr size_t kOpRows = 20;  // the op table lists the ops that take the most time

struct Category {
  const char* name;
  const char* color;
};
// profile.json's categories in the order a step meets them, each with its colour.
constexpr Category kCategories[] = {
    {"matmul", "#2563eb"},     {"attention", "#9333ea"}, {"norm", "#16a34a"},      {"rope", "#06b6d4"},
    {"activation", "#ea580c"}, {"embedding", "#ca8a04"}, {"loss", "#dc2626"},      {"optimizer", "#db2777"},
    {"memory", "#0d9488"},     {"other", "#475569"},
};

std::string category_color(const std::string& name) {
  for (const Category& c : kCategories)
    if (name == c.name) return c.color;
  return "#475569";
}

std::string cell(const std::string& s, bool numeric = false) {
  return fmt::format("<td{}>{}</td>", numeric ? " class=\"num\"" : "", html_escape(s));
}

std::string header_row(std::initializer_list<std::pair<const char*, bool>> columns) {
  std::string out = "<tr>";
  for (const auto& [name, numeric] : columns) out += fmt::format("<th{}>{}</th>", numeric ? " class=\"num\"" : "", name);
  return out + "</tr>";
}

std::string swatch(const std::string& color) {
  return fmt::format("<span class=\"swatch\" style=\"background:{}\"></span>", color);
}

std::string percent(double fraction) {
  return std::isfinite(fraction) ? fmt::format("{:.1f}%", 100 * fraction) : "–";
}

std::string maybe(double v, const char* format_spec = "{:.2f}") {
  return std::isfinite(v) ? fmt::format(fmt::runtime(format_spec), v) : "–";
}

std::string bytes_text(double b) { return std::isfinite(b) ? format_bytes(b) : "–"; }

// A rate with three significant digits at most, and no more decimals than that: "2980", "26.0", "3.33", "0.271".
std::string rate_text(double v) {
  if (!std::isfinite(v)) return "–";
  const double a = std::fabs(v);
  return fmt::format("{:.{}f}", v, a >= 100 ? 0 : a >= 10 ? 1 : a >= 1 ? 2 : 3);
}

// ---- time ---------------------------------------------------------------------------------------

struct CategoryTime {
  std::string name;
  double ms = 0;
  double calls = 0;
  int ops = 0;
};

std::vector<CategoryTime> time_by_category(const json& ops) {
  std::map<std::string, CategoryTime> by_name;
  for (const json& op : ops) {
    const std::string name = text(op, "category", "other");
    CategoryTime& c = by_name[name];
    c.name = name;
    if (std::isfinite(number(op, "ms"))) c.ms += number(op, "ms");
    if (std::isfinite(number(op, "calls"))) c.calls += number(op, "calls");
    c.ops++;
  }
  std::vector<CategoryTime> out;
  for (const Category& k : kCategories) {
    auto it = by_name.find(k.name);
    if (it == by_name.end()) continue;
    out.push_back(it->second);
    by_name.erase(it);
  }
  for (auto& [name, c] : by_name) out.push_back(c);  // categories this page does not know yet
  return out;
}

// What profile.json's `totals` adds to the kernels: time that no op accounts for.
struct Overhead {
  const char* key;
  const char* label;
  const char* color;
};
constexpr Overhead kOverheads[] = {
    {"gaps_ms", "host/launch gaps", "#78716c"},
    {"data_wait_ms", "data wait", "#a16207"},
    {"communication_ms", "exposed communication", "#4338ca"},
    {"unexplained_ms", "unexplained", "#94a3b8"},
};

std::string profile_summary(const json& p) {
  const json& ceilings = child(p, "ceilings");
  std::string s = fmt::format("Measured over {} step(s) on <b>{}</b> ({}): <b>{} ms</b> per step, {} tokens/s, MFU {}, HFU {}",
                              html_escape(format_number(number(p, "steps"))), html_escape(text(p, "device", "?")),
                              html_escape(text(p, "backend", "?")), html_escape(maybe(number(p, "step_ms"))),
                              html_escape(format_number(number(p, "tokens_per_s"))), percent(number(p, "mfu")),
                              percent(number(p, "hfu")));
  if (std::isfinite(number(p, "peak_tflops")))
    s += fmt::format(" against a peak of {}", html_escape(format_flop_rate(number(p, "peak_tflops") * 1e12)));
  if (ceilings.is_object()) {
    const double matmul = number(ceilings, "matmul_tflops");  // GFLOP/s under 1 TFLOP/s (a CPU's)
    s += fmt::format(". Ceilings: matmul {}, copy {} GB/s ({})",
                     html_escape(std::isfinite(matmul) ? format_flop_rate(matmul * 1e12) : "–"),
                     html_escape(rate_text(number(ceilings, "copy_gbps"))), html_escape(text(ceilings, "source", "?")));
  }
  return "<p>" + s + ".</p>";
}

std::string category_table(const std::vector<CategoryTime>& cats, const json& totals, double step_ms) {
  std::string rows;
  for (const CategoryTime& c : cats)
    rows += "<tr><td>" + swatch(category_color(c.name)) + html_escape(c.name) + "</td>" + cell(maybe(c.ms, "{:.3f}"), true) +
            cell(percent(c.ms / step_ms), true) + cell(format_number(c.calls), true) + cell(std::to_string(c.ops), true) + "</tr>";
  for (const Overhead& o : kOverheads)
    if (std::isfinite(number(totals, o.key)))
      rows += "<tr><td>" + swatch(o.color) + o.label + "</td>" + cell(maybe(number(totals, o.key), "{:.3f}"), true) +
              cell(percent(number(totals, o.key) / step_ms), true) + "<td></td><td></td></tr>";
  if (std::isfinite(number(totals, "recompute_ms")) && number(totals, "recompute_ms") > 0)
    rows += "<tr class=\"sub\"><td>of which recompute</td>" + cell(maybe(number(totals, "recompute_ms"), "{:.3f}"), true) +
            cell(percent(number(totals, "recompute_ms") / step_ms), true) + "<td></td><td></td></tr>";
  rows += "<tr class=\"total\"><td>step</td>" + cell(maybe(step_ms, "{:.3f}"), true) + cell("100%", true) + "<td></td><td></td></tr>";
  return "<table class=\"narrow\"><thead>" + header_row({{"category", false}, {"ms per step", true}, {"share", true}, {"calls", true}, {"ops", true}}) +
         "</thead><tbody>" + rows + "</tbody></table>";
}

std::string op_table(const json& ops) {
  std::vector<const json*> sorted;
  for (const json& op : ops) sorted.push_back(&op);
  std::stable_sort(sorted.begin(), sorted.end(), [](const json* a, const json* b) {
    const double ma = number(*a, "ms"), mb = number(*b, "ms");
    return (std::isfinite(ma) ? ma : -1) > (std::isfinite(mb) ? mb : -1);
  });
  // The FLOP rates in TFLOP/s where some op reaches one, else (a CPU's) in GFLOP/s.
  double fastest = 0;
  for (const json* op : sorted)
    if (std::isfinite(number(*op, "tflops"))) fastest = std::max(fastest, number(*op, "tflops"));
  const bool tera = fastest >= 1;
  std::string rows;
  bool above = false;
  for (size_t i = 0; i < std::min(sorted.size(), kOpRows); i++) {
    const json& op = *sorted[i];
    // A share above 100% (the profile counts one at 100% and says so: profile_report.h OpRow) is shown as 100%.
    const double share = number(op, "ceiling_share");
    const bool faster = (op.contains("above_ceiling") && op["above_ceiling"].is_boolean() &&
                         op["above_ceiling"].get<bool>()) || share > 1;
    above = above || faster;
    rows += "<tr><td><code>" + html_escape(text(op, "name", "?")) + "</code></td>" + "<td>" +
            swatch(category_color(text(op, "category", "other"))) + html_escape(text(op, "category", "other")) +
            "</td>" + cell(format_number(number(op, "calls")), true) + cell(maybe(number(op, "ms"), "{:.3f}"), true) +
            cell(percent(number(op, "share")), true) + cell(rate_text(number(op, "tflops") * (tera ? 1 : 1e3)), true) +
            cell(rate_text(number(op, "gbps")), true) +
            cell(percent(std::min(share, 1.0)) + (faster ? "*" : ""), true) + cell(text(op, "bound", "–")) + "</tr>";
  }
  std::string caption = sorted.size() > kOpRows ? fmt::format("The {} slowest of {} ops", kOpRows, sorted.size())
                                                : fmt::format("All {} ops", sorted.size());
  return "<h3>" + html_escape(caption) + ", per step</h3><table><thead>" +
         header_row({{"op", false}, {"category", false}, {"calls", true}, {"ms", true}, {"share", true},
                     {tera ? "TFLOP/s" : "GFLOP/s", true}, {"GB/s", true}, {"of ceiling", true}, {"bound", false}}) +
         "</thead><tbody>" + rows + "</tbody></table>" +
         (above ? "<p class=\"hint\">* faster than the ceiling measured, counted at 100%: the ceiling was measured at "
                  "another moment of a busy machine, or the op's bytes stayed in cache; its own rate is as measured.</p>"
                : "");
}

std::string advice_list(const json& advice) {
  if (!advice.is_array() || advice.empty()) return "";
  std::string items;
  for (const json& a : advice) {
    const double payoff = number(a, "payoff_pct");
    const bool later = a.is_object() && a.contains("actionable") && a["actionable"].is_boolean() && !a["actionable"].get<bool>();
    items += "<li><b>" + html_escape(text(a, "title", "?")) + "</b>" + (later ? " (not available in tokamak yet)" : "") +
             (std::isfinite(payoff) ? fmt::format(" <span class=\"payoff\">~{:.1f}% of the step</span>", payoff) : "") +
             "<br><span class=\"hint\">" + html_escape(text(a, "detail")) + "</span></li>";
  }
  return "<h3>What to change</h3><ol class=\"advice\">" + items + "</ol>";
}

// A word for a POSIX shell: quoted when it holds anything but letters, digits and ./_:=-.
std::string shell_word(const std::string& s) {
  const bool plain = !s.empty() && s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                                       "0123456789./_:=-") == std::string::npos;
  if (plain) return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The `tokamak profile` command that measures this run's step: its own flags where config.json has them, what the
// step computes (shape, recompute, offload, precision, moments) and, for a run of several ranks, as many ranks at its
// ZeRO stage.
std::string profile_command(const RunFiles& run) {
  const json& t = child(run.config, "train");
  std::string cmd = "tokamak profile";
  auto flag_of = [](std::string key) {
    std::replace(key.begin(), key.end(), '_', '-');
    return " --" + key;
  };
  const bool fp8 = child(t, "fp8").is_boolean() && child(t, "fp8").get<bool>();  // said by --fp8, not --precision
  for (const char* key : {"model", "data", "vocab_size", "batch", "seq", "batch_tokens", "recompute", "offload", "device",
                          "precision", "moments"}) {
    const json& v = child(t, key);
    if (v.is_null() || (v.is_number() && v.get<double>() == 0) || (v.is_string() && v.get<std::string>() == "none") ||
        (fp8 && std::string(key) == "precision"))
      continue;
    cmd += flag_of(key) + " " + shell_word(v.is_string() ? v.get<std::string>() : v.dump());
  }
  for (const char* key : {"fp8", "fp8_lm_head", "doc_mask"})
    if (child(t, key).is_boolean() && child(t, key).get<bool>()) cmd += flag_of(key);
  if (text(t, "fp8_scaling", "delayed") != "delayed") cmd += " --fp8-scaling " + shell_word(text(t, "fp8_scaling", ""));
  const double ranks = number(run.config, "world_size");
  if (std::isfinite(ranks) && ranks > 1)
    cmd += fmt::format(" --gpus {:.0f} --zero {:.0f}", ranks, std::max(0.0, number(t, "zero")));
  if (!t.is_object()) cmd += " (the run's train flags)";
  return cmd + " --out " + shell_word(run.dir);
}

// ---- memory -------------------------------------------------------------------------------------

std::string memory_plan(const json& m) {
  const double total = number(m, "total_bytes"), capacity = number(m, "capacity_bytes");
  std::vector<BarSegment> segments;
  std::string rows;
  const json& list = child(m, "rows");
  for (size_t i = 0; list.is_array() && i < list.size(); i++) {
    const json& r = list[i];
    const std::string color = chart_palette()[i % chart_palette().size()];
    segments.push_back({text(r, "component", "?"), number(r, "bytes"), color});
    rows += "<tr><td>" + swatch(color) + html_escape(text(r, "component", "?")) + "</td>" +
            cell(bytes_text(number(r, "bytes")), true) + cell(percent(number(r, "bytes") / total), true) +
            cell(text(r, "note")) + "</tr>";
  }
  rows += "<tr class=\"total\"><td>total</td>" + cell(bytes_text(total), true) + cell("100%", true) + "<td></td></tr>";
  std::string out = fmt::format("<p>Planned for <b>{}</b>: {}", html_escape(text(m, "device", "?")), html_escape(bytes_text(total)));
  const bool has_capacity = std::isfinite(capacity) && capacity > 0;
  out += has_capacity ? fmt::format(" of {} ({} of the device; the bar's grey end is what stays free).</p>",
                                    html_escape(bytes_text(capacity)), percent(total / capacity))
                      : ".</p>";
  out += render_stacked_bar("bar-memory", segments, has_capacity ? capacity : total, "bytes");
  return out + "<table><thead>" + header_row({{"component", false}, {"size", true}, {"share", true}, {"note", false}}) +
         "</thead><tbody>" + rows + "</tbody></table>";
}

// Without memory.json: the two sizes config.json records.
std::string memory_from_config(const json& config) {
  const json& m = child(config, "memory");
  std::string out = "<p class=\"hint\">This run directory has no memory.json (runs of older trainers lack it).";
  if (!m.is_object()) return out + "</p>";
  out += " Its config.json records:</p><table class=\"narrow\"><tbody>";
  out += "<tr><td>activations kept for backward</td>" + cell(bytes_text(number(m, "activation_bytes")), true) + "</tr>";
  out += "<tr><td>optimizer state</td>" + cell(bytes_text(number(m, "optimizer_bytes")), true) + "</tr>";
  return out + "</tbody></table>";
}

std::string memory_in_use_chart(const std::vector<StepLine>& steps) {
  double peak = 0;
  for (const StepLine& l : steps)
    if (std::isfinite(l.memory_bytes)) peak = std::max(peak, l.memory_bytes);
  const bool gib = peak >= double(1ull << 30);
  LineChart c{"chart-memory", "step", gib ? "GiB" : "MiB"};
  c.y_from_zero = true;
  ChartSeries s{"in use", {}, {}, "#0d9488"};
  for (const StepLine& l : steps) {
    s.x.push_back(double(l.step));
    s.y.push_back(l.memory_bytes / double(gib ? 1ull << 30 : 1ull << 20));
  }
  c.series.push_back(s);
  return fmt::format("<figure><figcaption>Memory in use vs step (peak {}; the process's resident memory on the CPU, "
                     "the device's on a GPU)</figcaption>{}</figure>",
                     html_escape(format_bytes(peak)), render_line_chart(c));
}

// ---- config -------------------------------------------------------------------------------------

// A value as a table shows it: sizes (keys ending in _bytes) in GiB or MiB, the device's peak (peak_flops) as a FLOP
// rate, the rest as the file has it.
std::string value_text(const std::string& key, const json& v) {
  auto ends_with = [&](const char* suffix) {
    const size_t n = std::char_traits<char>::length(suffix);
    return key.size() >= n && key.compare(key.size() - n, n, suffix) == 0;
  };
  if (v.is_number() && ends_with("_bytes")) return format_bytes(v.get<double>());
  if (v.is_number() && ends_with("peak_flops") && v.get<double>() > 0) return format_flop_rate(v.get<double>());
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// The train table's keys as the flags and config.toml spell them (batch-tokens), not as config.json does.
std::string flag_name(std::string key) {
  std::replace(key.begin(), key.end(), '_', '-');
  return key;
}

void flatten(const json& j, const std::string& prefix, std::vector<std::pair<std::string, std::string>>& rows,
             bool flags = false) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string name = flags ? flag_name(it.key()) : it.key();
    const std::string key = prefix.empty() ? name : prefix + "." + name;
    if (it->is_object()) flatten(*it, key, rows, flags);
    else rows.emplace_back(key, value_text(it.key(), *it));
  }
}

std::string key_value_table(const std::string& title, const std::vector<std::pair<std::string, std::string>>& rows) {
  std::string out = "<div><h3>" + html_escape(title) + "</h3><table class=\"kv\"><tbody>";
  for (const auto& [k, v] : rows) out += "<tr><th>" + html_escape(k) + "</th>" + cell(v) + "</tr>";
  return out + "</tbody></table></div>";
}

}  // namespace

std::string time_section(const RunFiles& run) {
  std::string out = "<section id=\"time\"><h2>Where a step's time goes</h2>";
  const json& p = run.profile;
  if (!p.is_object()) {
    return out + "<p class=\"hint\">No profile.json in this run directory. To measure each op's share of a step, its "
                 "FLOP/s against the device's ceilings and what to change, run</p><pre>" +
           html_escape(profile_command(run)) + "</pre><p class=\"hint\">and make this report again.</p></section>";
  }
  const json& ops = child(p, "ops");
  const json& totals = child(p, "totals");
  const std::vector<CategoryTime> cats = time_by_category(ops.is_array() ? ops : json::array());
  std::vector<BarSegment> segments;
  for (const CategoryTime& c : cats) segments.push_back({c.name, c.ms, category_color(c.name)});
  for (const Overhead& o : kOverheads) segments.push_back({o.label, number(totals, o.key), o.color});
  double step_ms = number(p, "step_ms");
  if (!(step_ms > 0)) {
    step_ms = 0;
    for (const BarSegment& s : segments) step_ms += std::isfinite(s.value) ? s.value : 0;
  }
  out += profile_summary(p);
  out += render_stacked_bar("bar-step-time", segments, step_ms, "ms per step");
  out += category_table(cats, totals, step_ms);
  if (ops.is_array()) out += op_table(ops);
  out += advice_list(child(p, "advice"));
  return out + "</section>";
}

std::string memory_section(const RunFiles& run) {
  std::string out = "<section id=\"memory\"><h2>Memory</h2>";
  out += run.memory.is_object() ? memory_plan(run.memory) : memory_from_config(run.config);
  if (!run.history.steps.empty()) out += "<div class=\"charts one\">" + memory_in_use_chart(run.history.steps) + "</div>";
  return out + "</section>";
}

std::string config_section(const RunFiles& run) {
  std::string out = "<section id=\"config\"><h2>Configuration</h2>";
  if (!run.config.is_object()) return out + "<p class=\"hint\">No config.json in this run directory.</p></section>";
  std::vector<std::pair<std::string, std::string>> top;
  std::string tables;
  for (auto it = run.config.begin(); it != run.config.end(); ++it) {
    if (!it->is_object()) {
      top.emplace_back(it.key(), value_text(it.key(), *it));
      continue;
    }
    std::vector<std::pair<std::string, std::string>> rows;
    flatten(*it, "", rows, it.key() == "train");
    tables += key_value_table(it.key(), rows);
  }
  out += "<div class=\"tables\">" + key_value_table("run", top) + tables + "</div>";
  return out + "</section>";
}

}  // namespace tk::report
