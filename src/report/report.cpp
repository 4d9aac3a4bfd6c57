// The report page: the summary cards, the charts drawn from log.jsonl (a data-parallel run's communication and data
// wait among them), and the page around the sections (report_sections.cpp holds the tables from profile.json,
// memory.json and config.json).
#include "report/report.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "core/format.h"
#include "core/fs.h"
#include "report/page_style.h"
#include "report/report_sections.h"
#include "report/svg_chart.h"

namespace tk::report {
namespace {

using json = nlohmann::json;

// Step-to-step noise hides the trend of a long run: its raw values are drawn faint under an EMA.
constexpr size_t kSmoothFrom = 30;
// A loss whose largest value is this many times its smallest (a run that diverged, 5 to 1e11; one learnt by heart,
// 5 to 0.01) is drawn on a log axis: on a linear one its trend would be a flat line at the bottom.
constexpr double kLogLossSpan = 20;

struct Steady {
  double tokens_per_s = kMissing, mfu = kMissing, hfu = kMissing, flops_per_s = kMissing;
  int64_t first_step = 0, last_step = 0;
};

// Time-weighted means over the logged steps, leaving out the first when there are others: it pays
// for warming up (allocation, first touches of memory, kernel selection).
Steady steady_throughput(const std::vector<StepLine>& steps) {
  Steady s;
  const size_t from = steps.size() > 1 ? 1 : 0;
  double time = 0, tokens = 0, mfu_time = 0, mfu = 0, hfu = 0, flops = 0;
  for (size_t i = from; i < steps.size(); i++) {
    const StepLine& l = steps[i];
    if (!std::isfinite(l.step_time_s) || !std::isfinite(l.tokens_per_s) || l.step_time_s <= 0) continue;
    time += l.step_time_s;
    tokens += l.tokens_per_s * l.step_time_s;
    if (std::isfinite(l.flops_per_s)) flops += l.flops_per_s * l.step_time_s;
    if (std::isfinite(l.mfu)) {
      mfu_time += l.step_time_s;
      mfu += l.mfu * l.step_time_s;
      if (std::isfinite(l.hfu)) hfu += l.hfu * l.step_time_s;
    }
  }
  if (time > 0) {
    s.tokens_per_s = tokens / time;
    s.flops_per_s = flops / time;
    s.first_step = steps[from].step;
    s.last_step = steps.back().step;
  }
  if (mfu_time > 0) {
    s.mfu = mfu / mfu_time;
    s.hfu = hfu / mfu_time;
  }
  return s;
}

// An exponential moving average, debiased at the start; missing values stay missing.
std::vector<double> smoothed(const std::vector<double>& y) {
  const double span = std::max(5.0, double(y.size()) / 40);
  const double alpha = 2 / (span + 1);
  std::vector<double> out;
  double avg = 0, weight = 0;
  for (double v : y) {
    if (!std::isfinite(v)) {
      out.push_back(kMissing);
      continue;
    }
    avg = (1 - alpha) * avg + alpha * v;
    weight = (1 - alpha) * weight + alpha;
    out.push_back(avg / weight);
  }
  return out;
}

template <class F> std::vector<double> column(const std::vector<StepLine>& steps, F f) {
  std::vector<double> v;
  v.reserve(steps.size());
  for (const StepLine& s : steps) v.push_back(f(s));
  return v;
}

// A step series, with its EMA in front of it when the run is long enough to need one.
void add_step_series(LineChart& chart, const std::string& name, const std::vector<double>& x,
                     const std::vector<double>& y, const std::string& color) {
  const bool smooth = y.size() >= kSmoothFrom;
  chart.series.push_back({name, x, y, color, smooth});
  if (smooth) chart.series.push_back({name + " (EMA)", x, smoothed(y), color});
}

ChartSeries flat_line(const std::string& name, double lo, double hi, double y, const std::string& color) {
  ChartSeries s{name, {lo, hi}, {y, y}, color};
  s.dashed = true;
  return s;
}

std::string figure(const std::string& caption, const std::string& svg, const std::string& note = "") {
  return fmt::format("<figure><figcaption>{}</figcaption>{}{}</figure>", html_escape(caption), svg,
                     note.empty() ? "" : "<p class=\"hint\">" + html_escape(note) + "</p>");
}

// ---- the summary --------------------------------------------------------------------------------

std::string card(const std::string& label, const std::string& value, const std::string& detail) {
  return fmt::format("<div class=\"card\"><div class=\"label\">{}</div><div class=\"value\">{}</div><div class=\"detail\">{}</div></div>",
                     html_escape(label), html_escape(value), html_escape(detail));
}

std::string format_utc(double unix_seconds) {
  if (!std::isfinite(unix_seconds)) return "";
  const std::time_t t = std::time_t(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

std::string loss_text(double v) { return std::isfinite(v) ? fmt::format("{:.4f}", v) : format_number(v); }

double last_finite(const std::vector<double>& v) {
  for (auto it = v.rbegin(); it != v.rend(); ++it)
    if (std::isfinite(*it)) return *it;
  return kMissing;
}

std::string model_card(const json& config) {
  const json& m = child(config, "model");
  std::string detail;
  if (m.is_object())
    detail = fmt::format("{} · {} layers · d {} · vocab {}", text(m, "model_type"), format_number(number(m, "num_hidden_layers")),
                         format_number(number(m, "hidden_size")), format_number(number(m, "vocab_size")));
  // A model given as a path is named by its last component: the whole path is in the config section.
  std::string name = text(config, "model_name", "unknown");
  if (const size_t slash = name.find_last_of('/'); slash != std::string::npos && slash + 1 < name.size())
    name = name.substr(slash + 1);
  const double params = number(config, "parameters");
  return card("Model", name, detail) +
         card("Parameters", std::isfinite(params) ? format_number(params) : "–",
              std::isfinite(number(config, "flops_per_token"))
                  ? fmt::format("{} FLOP per token", format_number(number(config, "flops_per_token")))
                  : "");
}

std::string progress_card(const RunFiles& run) {
  const auto& steps = run.history.steps;
  const double planned = number(child(run.config, "train"), "steps");
  const std::string of = std::isfinite(planned) ? fmt::format(" of {}", int64_t(planned)) : "";
  if (const auto& d = run.history.diverged)
    return card("Tokens trained", steps.empty() ? "0" : format_number(steps.back().tokens),
                fmt::format("diverged at step {}{}", d->step, of));
  if (steps.empty()) return card("Tokens trained", "0", "no step logged yet");
  const StepLine& last = steps.back();
  return card("Tokens trained", format_number(last.tokens), fmt::format("step {}{}", last.step, of));
}

std::string loss_cards(const RunFiles& run) {
  const auto& h = run.history;
  const double train = last_finite(column(h.steps, [](const StepLine& s) { return s.loss; }));
  const double unigram = number(run.config, "unigram_entropy_nats");
  std::string out = card("Final train loss", h.steps.empty() ? "–" : loss_text(h.steps.back().loss),
                         std::isfinite(unigram) && unigram > 0 ? fmt::format("unigram entropy {:.4f}", unigram)
                         : std::isfinite(train)                ? fmt::format("last finite {:.4f}", train)
                                                               : "");
  if (h.vals.empty()) return out + card("Final val loss", "–", "no validation yet");
  const ValLine& v = h.vals.back();
  return out + card("Final val loss", loss_text(v.val_loss),
                    fmt::format("perplexity {} at step {}", format_number(std::exp(v.val_loss)), v.step));
}

std::string throughput_cards(const RunFiles& run) {
  const Steady s = steady_throughput(run.history.steps);
  const std::string over = s.first_step == s.last_step ? fmt::format("step {}", s.first_step)
                                                       : fmt::format("mean over steps {}–{}", s.first_step, s.last_step);
  std::string out = card("Tokens/s", std::isfinite(s.tokens_per_s) ? format_number(s.tokens_per_s) : "–",
                         std::isfinite(s.tokens_per_s) ? over : "");
  if (std::isfinite(s.mfu)) {
    const double peak = number(run.config, "peak_flops");
    out += card("MFU", fmt::format("{:.1f}%", 100 * s.mfu),
                fmt::format("HFU {:.1f}%{}", 100 * s.hfu,
                            std::isfinite(peak) && peak > 0 ? fmt::format(" of {:.0f} TFLOP/s", peak / 1e12) : ""));
  } else {
    out += card("MFU", "n/a",
                std::isfinite(s.flops_per_s) ? fmt::format("{} GFLOP/s achieved; no peak known for this device",
                                                           format_number(s.flops_per_s / 1e9))
                                             : "no peak known for this device");
  }
  return out;
}

// The training time over every session of the run: elapsed_s restarts from 0 when a run is resumed.
struct WallTime {
  double seconds = kMissing;
  int sessions = 0;
};

WallTime wall_time(const std::vector<StepLine>& steps) {
  WallTime w;
  double done = 0, last = kMissing;
  for (const StepLine& s : steps) {
    if (!std::isfinite(s.elapsed_s)) continue;
    if (!std::isfinite(last) || s.elapsed_s < last) {
      done += std::isfinite(last) ? last : 0;
      w.sessions++;
    }
    last = s.elapsed_s;
  }
  if (std::isfinite(last)) w.seconds = done + last;
  return w;
}

std::string device_cards(const RunFiles& run) {
  const auto& steps = run.history.steps;
  const WallTime wall = wall_time(steps);
  const double started = steps.empty() ? kMissing : steps.front().time;
  std::string detail = std::isfinite(started) ? "first step " + format_utc(started) : "";
  if (wall.sessions > 1) detail += fmt::format(" · {} sessions (resumed)", wall.sessions);
  return card("Device", text(run.config, "device", "unknown"), "backend " + text(run.config, "backend", "unknown")) +
         card("Wall time", format_duration(wall.seconds), detail);
}

std::string summary_section(const RunFiles& run) {
  return "<section id=\"summary\"><div class=\"cards\">" + model_card(run.config) + progress_card(run) +
         loss_cards(run) + throughput_cards(run) + device_cards(run) + "</div></section>";
}

// ---- the charts ---------------------------------------------------------------------------------

struct StepColumns {
  std::vector<double> step, tokens;
};

StepColumns step_columns(const std::vector<StepLine>& steps) {
  return {column(steps, [](const StepLine& s) { return double(s.step); }),
          column(steps, [](const StepLine& s) { return s.tokens; })};
}

// Whether the finite positive values of `y` span more than kLogLossSpan.
bool spans_decades(const std::vector<double>& y) {
  double lo = kMissing, hi = kMissing;
  for (double v : y) {
    if (!std::isfinite(v) || v <= 0) continue;
    lo = std::isfinite(lo) ? std::min(lo, v) : v;
    hi = std::isfinite(hi) ? std::max(hi, v) : v;
  }
  return std::isfinite(lo) && hi > kLogLossSpan * lo;
}

// A dashed vertical line at the step where the run diverged, from the lowest to the highest value of `y` that the
// chart's axis can draw.
void add_diverged_marker(LineChart& chart, int64_t step, const std::vector<double>& y) {
  double lo = kMissing, hi = kMissing;
  for (double v : y) {
    if (!std::isfinite(v) || (chart.log_y && v <= 0)) continue;
    lo = std::isfinite(lo) ? std::min(lo, v) : v;
    hi = std::isfinite(hi) ? std::max(hi, v) : v;
  }
  if (!std::isfinite(lo)) return;
  ChartSeries at{fmt::format("diverged (step {})", step), {double(step), double(step)}, {lo, hi}, "#dc2626"};
  at.dashed = true;
  chart.series.push_back(at);
}

// The loss against `x` (steps or tokens): train loss, validation loss, the unigram entropy the loss must fall
// below to have learnt more than token frequencies, and, against steps, the step where the run diverged.
LineChart loss_chart(const RunFiles& run, bool by_tokens) {
  const auto& h = run.history;
  const StepColumns c = step_columns(h.steps);
  const std::vector<double>& x = by_tokens ? c.tokens : c.step;
  LineChart chart{by_tokens ? "chart-loss-tokens" : "chart-loss-step", by_tokens ? "tokens" : "step", "loss (nats/token)"};
  const std::vector<double> train = column(h.steps, [](const StepLine& s) { return s.loss; });
  chart.log_y = spans_decades(train);
  add_step_series(chart, "train loss", x, train, "#2563eb");

  std::map<int64_t, double> tokens_at;
  for (const StepLine& s : h.steps) tokens_at[s.step] = s.tokens;
  ChartSeries val{"val loss", {}, {}, "#dc2626"};
  val.markers = true;
  for (const ValLine& v : h.vals) {
    auto it = tokens_at.find(v.step);
    val.x.push_back(by_tokens ? (it == tokens_at.end() ? kMissing : it->second) : double(v.step));
    val.y.push_back(v.val_loss);
  }
  if (!val.x.empty()) chart.series.push_back(val);

  const double unigram = number(run.config, "unigram_entropy_nats");
  if (std::isfinite(unigram) && unigram > 0 && !x.empty())
    chart.series.push_back(flat_line("unigram entropy", x.front(), x.back(), unigram, "#9ca3af"));
  if (h.diverged && !by_tokens) add_diverged_marker(chart, h.diverged->step, train);
  return chart;
}

std::string loss_section(const RunFiles& run) {
  const LineChart by_step = loss_chart(run, false);
  const std::string note =
      by_step.log_y ? fmt::format("On a log axis: the loss spans more than a factor of {:.0f}.", kLogLossSpan) : "";
  return "<section id=\"loss\"><h2>Loss</h2><div class=\"charts\">" +
         figure("Loss vs step", render_line_chart(by_step), note) +
         figure("Loss vs tokens", render_line_chart(loss_chart(run, true)), note) + "</div></section>";
}

// A GPU run's SM clock per step, with its power and what held the clock back in the note; "" where not logged.
std::string clock_figure(const std::vector<StepLine>& steps, const StepColumns& c) {
  std::vector<double> clock = column(steps, [](const StepLine& s) { return s.sm_clock_mhz; });
  if (std::none_of(clock.begin(), clock.end(), [](double x) { return std::isfinite(x); })) return "";
  LineChart chart{"chart-sm-clock", "step", "MHz"};
  chart.y_from_zero = true;
  add_step_series(chart, "SM clock", c.step, clock, "#0891b2");
  double power = 0;
  int logged = 0, powered = 0, held = 0;
  std::map<std::string, int> by;
  for (const StepLine& s : steps) {
    if (!std::isfinite(s.sm_clock_mhz)) continue;
    logged++;
    if (std::isfinite(s.power_w)) power += s.power_w, powered++;
    if (!s.clock_held_back_by.empty()) held++, by[s.clock_held_back_by]++;
  }
  std::string note = powered == 0 ? std::string()
                                  : fmt::format("Power {:.0f} W on average (NVML's reading, itself an average over "
                                                "about a second).", power / powered);
  if (held > 0) {
    const auto most = std::max_element(by.begin(), by.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
    note += fmt::format("{}The clock was held back in {} of {} steps, most by {}: every kernel ran at that clock.",
                        note.empty() ? "" : " ", held, logged, most->first);
  }
  return figure("SM clock vs step", render_line_chart(chart), note);
}

std::string throughput_section(const RunFiles& run) {
  const auto& steps = run.history.steps;
  const StepColumns c = step_columns(steps);
  LineChart tps{"chart-tokens-per-s", "step", "tokens/s"};
  tps.y_from_zero = true;
  add_step_series(tps, "tokens/s", c.step, column(steps, [](const StepLine& s) { return s.tokens_per_s; }), "#16a34a");

  const bool has_mfu = std::any_of(steps.begin(), steps.end(), [](const StepLine& s) { return std::isfinite(s.mfu); });
  LineChart util{"chart-mfu", "step", has_mfu ? "% of peak" : "GFLOP/s"};
  util.y_from_zero = true;
  std::string caption = "MFU and HFU vs step", note;
  if (has_mfu) {
    add_step_series(util, "MFU", c.step, column(steps, [](const StepLine& s) { return 100 * s.mfu; }), "#9333ea");
    add_step_series(util, "HFU", c.step, column(steps, [](const StepLine& s) { return 100 * s.hfu; }), "#ea580c");
  } else {
    caption = "Achieved model FLOP/s vs step";
    note = "No MFU: the device's peak rate is not known (on a GPU, give it with --peak-tflops).";
    add_step_series(util, "model GFLOP/s", c.step, column(steps, [](const StepLine& s) { return s.flops_per_s / 1e9; }),
                    "#9333ea");
  }
  return "<section id=\"throughput\"><h2>Throughput</h2><div class=\"charts\">" +
         figure("Tokens/s vs step", render_line_chart(tps)) + figure(caption, render_line_chart(util), note) +
         clock_figure(steps, c) + "</div></section>";
}

// ---- a data-parallel run's communication and data wait ----------------------------------------------

// Each rank's data wait is drawn as its own line up to this many ranks; a larger run draws rank 0 and the slowest.
constexpr size_t kRanksDrawnEach = 8;

double sum_finite(const std::vector<double>& v) {
  double s = 0;
  for (double x : v)
    if (std::isfinite(x)) s += x;
  return s;
}

// The run's totals: rank 0's communication against its step time, the most exposed rank at each step summed, and
// each rank's data wait (as far as the log lists every rank's).
std::string communication_cards(const std::vector<StepLine>& steps) {
  const double step_s = sum_finite(column(steps, [](const StepLine& s) { return s.step_time_s; }));
  const double comm = sum_finite(column(steps, [](const StepLine& s) { return s.comm_s; }));
  const double exposed = sum_finite(column(steps, [](const StepLine& s) { return s.comm_exposed_s; }));
  const double exposed_max = sum_finite(column(steps, [](const StepLine& s) { return s.comm_exposed_max_s; }));
  const double host = sum_finite(column(steps, [](const StepLine& s) { return s.comm_host_s; }));
  auto share = [&](double part) { return step_s > 0 ? fmt::format("{:.1f}%", 100 * part / step_s) : "–"; };
  std::string out = card("Communication", format_short_duration(comm),
                         fmt::format("rank 0's collectives, {} of the step time; host gathers {}", share(comm),
                                     format_short_duration(host)));
  out += card("Exposed communication", share(exposed),
              fmt::format("of the step time on rank 0 ({}); the most exposed rank of each step: {}",
                          format_short_duration(exposed), share(exposed_max)));
  std::vector<double> waits;
  for (const StepLine& s : steps)
    for (size_t r = 0; r < s.data_wait_by_rank_s.size(); r++) {
      if (waits.size() <= r) waits.resize(r + 1, 0.0);
      if (std::isfinite(s.data_wait_by_rank_s[r])) waits[r] += s.data_wait_by_rank_s[r];
    }
  if (waits.empty()) return out;
  const size_t slowest = size_t(std::max_element(waits.begin(), waits.end()) - waits.begin());
  const size_t fastest = size_t(std::min_element(waits.begin(), waits.end()) - waits.begin());
  return out + card("Data wait", format_short_duration(waits[slowest]),
                    fmt::format("rank {}, the slowest of {}; the least rank {}, {}", slowest, waits.size(), fastest,
                                format_short_duration(waits[fastest])));
}

// Shown for a data-parallel run's log (one that has comm_s): per step, rank 0's collectives, the part of them the
// compute waited for and its host gathers, with the most of any rank; and each rank's data wait.
std::string communication_section(const RunFiles& run) {
  const auto& steps = run.history.steps;
  if (std::none_of(steps.begin(), steps.end(), [](const StepLine& s) { return std::isfinite(s.comm_s); })) return "";
  const StepColumns c = step_columns(steps);
  auto ms = [&](double StepLine::*field) { return column(steps, [field](const StepLine& s) { return 1e3 * (s.*field); }); };
  LineChart comm{"chart-communication", "step", "milliseconds"};
  comm.y_from_zero = true;
  add_step_series(comm, "collectives (rank 0)", c.step, ms(&StepLine::comm_s), "#2563eb");
  add_step_series(comm, "exposed (rank 0)", c.step, ms(&StepLine::comm_exposed_s), "#dc2626");
  add_step_series(comm, "host gathers (rank 0)", c.step, ms(&StepLine::comm_host_s), "#6b7280");
  ChartSeries most{"collectives (the most of any rank)", c.step, ms(&StepLine::comm_max_s), "#2563eb"};
  most.dashed = true;
  ChartSeries most_exposed{"exposed (the most of any rank)", c.step, ms(&StepLine::comm_exposed_max_s), "#dc2626"};
  most_exposed.dashed = true;
  comm.series.push_back(most);
  comm.series.push_back(most_exposed);

  size_t ranks = 0;
  for (const StepLine& s : steps) ranks = std::max(ranks, s.data_wait_by_rank_s.size());
  LineChart wait{"chart-data-wait", "step", "milliseconds"};
  wait.y_from_zero = true;
  if (ranks > 0 && ranks <= kRanksDrawnEach) {
    for (size_t r = 0; r < ranks; r++)
      add_step_series(wait, fmt::format("rank {}", r), c.step, column(steps, [r](const StepLine& s) {
                        return r < s.data_wait_by_rank_s.size() ? 1e3 * s.data_wait_by_rank_s[r] : kMissing;
                      }), chart_palette()[r % chart_palette().size()]);
  } else {
    add_step_series(wait, "rank 0", c.step, ms(&StepLine::data_wait_s), "#16a34a");
    add_step_series(wait, "the slowest rank", c.step, ms(&StepLine::data_wait_max_s), "#ea580c");
  }
  const std::string note =
      "Exposed: the time the compute waited for a collective (NCCL: its stream blocked on one; MPI runs each on the "
      "thread that computes, so all of it). A collective's time includes waiting for the ranks that reach it last.";
  return "<section id=\"communication\"><h2>Communication and data wait</h2><div class=\"cards\">" +
         communication_cards(steps) + "</div><div class=\"charts\">" +
         figure("Communication per step", render_line_chart(comm), note) +
         figure(ranks > kRanksDrawnEach ? "Data wait per step (rank 0 and the slowest rank)" : "Data wait per step, by rank",
                render_line_chart(wait)) +
         "</div></section>";
}

std::string optimizer_section(const RunFiles& run) {
  const auto& steps = run.history.steps;
  const StepColumns c = step_columns(steps);
  LineChart lr{"chart-lr", "step", "learning rate"};
  lr.y_from_zero = true;
  lr.series.push_back({"learning rate", c.step, column(steps, [](const StepLine& s) { return s.lr; }), "#0891b2"});

  LineChart grad{"chart-grad-norm", "step", "gradient norm"};
  grad.log_y = true;
  add_step_series(grad, "grad norm", c.step, column(steps, [](const StepLine& s) { return s.grad_norm; }), "#ea580c");
  const double clip = number(child(run.config, "train"), "grad_clip");
  if (std::isfinite(clip) && clip > 0 && !steps.empty())
    grad.series.push_back(flat_line("clip limit", c.step.front(), c.step.back(), clip, "#6b7280"));
  return "<section id=\"optimizer\"><h2>Optimizer</h2><div class=\"charts\">" +
         figure("Learning rate vs step", render_line_chart(lr)) +
         figure("Gradient norm (before clipping) vs step", render_line_chart(grad)) + "</div></section>";
}

// ---- the page -----------------------------------------------------------------------------------

std::string run_status_note(const RunFiles& run) {
  if (const auto& d = run.history.diverged) {
    const std::string what = !std::isfinite(d->loss) ? "its loss" : "its gradient norm";
    return fmt::format("The run diverged at step {}: {} was not finite (NaN or infinite), and training stopped there. "
                       "Lower --lr, lengthen --warmup or clip the gradient (--grad-clip), then train it again.",
                       d->step, what);
  }
  if (run.history.steps.empty()) return "";
  const double planned = number(child(run.config, "train"), "steps");
  const int64_t last = run.history.steps.back().step;
  if (!std::isfinite(planned) || double(last) >= planned) return "";
  return fmt::format("The log ends at step {} of {}: the run is still going, or it was stopped "
                     "(tokamak train --resume {} continues it).",
                     last, int64_t(planned), run.dir);
}

std::string notes_block(const RunFiles& run) {
  std::vector<std::string> notes = run.notes;
  if (std::string s = run_status_note(run); !s.empty()) notes.insert(notes.begin(), s);
  std::string out;
  for (const std::string& n : notes) out += "<div class=\"note\">" + html_escape(n) + "</div>";
  return out.empty() ? "" : "<div class=\"notes\">" + out + "</div>";
}

std::string now_utc() {
  return format_utc(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
}

}  // namespace

std::string render_report(const RunFiles& run) {
  const std::string name = std::filesystem::path(run.dir).lexically_normal().filename().string();
  std::string page = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                     "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">";
  page += "<title>tokamak report: " + html_escape(name.empty() ? run.dir : name) + "</title>";
  page += "<style>" + std::string(kPageStyle) + "</style></head><body><main>";
  page += fmt::format("<header><h1>tokamak run report</h1><p class=\"sub\">{} · generated {}</p></header>",
                      html_escape(run.dir), now_utc());
  page += notes_block(run);
  page += summary_section(run);
  page += loss_section(run);
  page += throughput_section(run);
  page += communication_section(run);
  page += optimizer_section(run);
  page += time_section(run);
  page += memory_section(run);
  page += config_section(run);
  page += "<footer>Made by <code>tokamak report</code> from the files in the run directory; it needs no network.</footer>";
  page += "</main></body></html>\n";
  return page;
}

std::string write_report(const std::string& run_dir, const std::string& out) {
  const RunFiles run = read_run_files(run_dir);
  const std::string path = out.empty() ? (std::filesystem::path(run_dir) / "report.html").string() : out;
  fs::write_file_atomic(path, render_report(run));
  return path;
}

}  // namespace tk::report
