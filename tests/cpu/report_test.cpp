// The run report: its page for a real CPU run and for hand-written logs (a truncated last line, NaN,
// one step, no validation), the escaping of text from files, the profile and memory sections, the
// errors for a directory that is not a run, the chart helpers, and the CLI.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "core/fs.h"
#include "report/report.h"
#include "report/svg_chart.h"
#include "report_testing.h"

namespace tk::report {
namespace {

namespace stdfs = std::filesystem;
using tk::testing::count_of;
using tk::testing::error_of;
using tk::testing::path_points;
using tk::testing::series_path;
using tk::testing::svg_with_id;
using tk::testing::TempDir;

std::string step_line(int step, const std::string& loss, double tokens_per_s = 1000) {
  return fmt::format("{{\"step\":{},\"loss\":{},\"lr\":{},\"grad_norm\":{},\"clip_scale\":1,\"tokens\":{},"
                     "\"step_time_s\":0.5,\"tokens_per_s\":{},\"flops_per_s\":2e9,\"mfu\":null,\"hfu\":null,"
                     "\"data_wait_s\":0,\"memory_bytes\":{},\"time\":1700000000,\"elapsed_s\":{}}}\n",
                     step, loss, 1e-3 * step, 0.5 + step, 512 * step, tokens_per_s, 1 << 26, step);
}

// A step line of a data-parallel run of two ranks: rank 0's communication, the most of either rank, each one's wait.
std::string data_parallel_step_line(int step, double comm, double exposed, double wait0, double wait1) {
  std::string line = step_line(step, "4.0");
  const std::string fields = fmt::format(
      "\"data_wait_max_s\":{},\"data_wait_max_rank\":{},\"data_wait_by_rank_s\":[{},{}],\"comm_s\":{},"
      "\"comm_exposed_s\":{},\"comm_host_s\":0.001,\"comm_collectives\":5,\"comm_max_s\":{},\"comm_max_rank\":1,"
      "\"comm_exposed_max_s\":{},\"comm_exposed_max_rank\":1,",
      std::max(wait0, wait1), wait1 > wait0 ? 1 : 0, wait0, wait1, comm, exposed, 2 * comm, 2 * exposed);
  line.insert(line.find("\"memory_bytes\""), fields);
  return line;
}

std::string val_line(int step, double loss) {
  return fmt::format("{{\"step\":{},\"val_loss\":{},\"val_tokens\":64,\"val_time_s\":0.1,\"time\":1700000000}}\n", step, loss);
}

// A run directory holding only `log`, and config.json when given.
std::string write_run(const TempDir& dir, const std::string& log, const std::string& config = "") {
  const std::string run = dir.path("run");
  stdfs::create_directories(run);
  tk::testing::write_text(run + "/log.jsonl", log);
  if (!config.empty()) tk::testing::write_text(run + "/config.json", config);
  return run;
}

std::string render(const std::string& run_dir) { return render_report(read_run_files(run_dir)); }

TEST(Report, PageOfARealCpuRun) {
  TempDir dir;
  const std::string run = tk::testing::train_cpu_run(dir, 8, 4);
  const std::string path = write_report(run);
  EXPECT_EQ(path, run + "/report.html");
  const std::string html = fs::read_file(path);

  for (const char* id : {"summary", "loss", "throughput", "optimizer", "time", "memory", "config"})
    EXPECT_NE(html.find(fmt::format("<section id=\"{}\"", id)), std::string::npos) << id;
  const std::string loss = svg_with_id(html, "chart-loss-step");
  EXPECT_EQ(path_points(series_path(loss, "train loss")), 8);
  EXPECT_EQ(path_points(series_path(loss, "val loss")), 2);  // steps 4 and 8
  EXPECT_EQ(path_points(series_path(svg_with_id(html, "chart-loss-tokens"), "val loss")), 2);
  EXPECT_EQ(path_points(series_path(svg_with_id(html, "chart-lr"), "learning rate")), 8);
  EXPECT_EQ(path_points(series_path(svg_with_id(html, "chart-grad-norm"), "grad norm")), 8);
  EXPECT_EQ(path_points(series_path(svg_with_id(html, "chart-tokens-per-s"), "tokens/s")), 8);
  EXPECT_EQ(path_points(series_path(svg_with_id(html, "chart-mfu"), "model GFLOP/s")), 8);  // no MFU on the CPU

  EXPECT_NE(html.find(">model.json</div><div class=\"detail\">llama · 2 layers · d 32 · vocab 320<"), std::string::npos);
  EXPECT_NE(html.find("tokamak profile --model"), std::string::npos);  // how to get profile.json
  EXPECT_NE(html.find("activation gradients and step scratch"), std::string::npos);  // the trainer's memory.json
  EXPECT_EQ(html.find("class=\"note\""), std::string::npos) << "a finished run has nothing to note";
  EXPECT_EQ(html.find("<section id=\"communication\""), std::string::npos) << "one process: no communication";
  // Self-contained: nothing to fetch, no script.
  for (const char* banned : {"<script", "<link", "src=", "http://", "https://", "url(", "@import"})
    EXPECT_EQ(html.find(banned), std::string::npos) << banned;
}

TEST(Report, TruncatedLastLineIsSkippedWithANote) {
  TempDir dir;
  std::string log = step_line(1, "5.0") + step_line(2, "4.5") + val_line(2, 4.6) + step_line(3, "4.2");
  log += step_line(4, "4.0").substr(0, 40);  // the trainer is writing this one
  const std::string html = render(write_run(dir, log));
  EXPECT_EQ(path_points(series_path(svg_with_id(html, "chart-loss-step"), "train loss")), 3);
  EXPECT_NE(html.find("last line of log.jsonl (line 5) is incomplete"), std::string::npos);
}

TEST(Report, RunInProgressIsNotedAndItsProfileCommandQuoted) {
  TempDir dir;
  const std::string html = render(write_run(dir, step_line(1, "5.0") + step_line(2, "4.0"),
                                            R"({"train": {"steps": 100000, "model": "my model.json", "batch": 4}})"));
  EXPECT_NE(html.find("The log ends at step 2 of 100000"), std::string::npos);
  EXPECT_NE(html.find(">step 2 of 100000<"), std::string::npos);
  EXPECT_NE(html.find("tokamak profile --model &#39;my model.json&#39; --batch 4 --out"), std::string::npos);
}

// The profile command repeats what the step computed: its precision and moments, the FP8 flags, and for a run of
// several ranks as many ranks at its ZeRO stage.
TEST(Report, ProfileCommandRepeatsThePrecisionAndTheRanks) {
  TempDir dir;
  const std::string html = render(write_run(
      dir, step_line(1, "5.0") + step_line(2, "4.0"),
      R"({"world_size": 4, "train": {"model": "llama3.2-1b", "batch": 8, "moments": "bf16", "precision": "auto",)"
      R"( "fp8": true, "fp8_lm_head": true, "fp8_scaling": "current", "doc_mask": false, "zero": 2}})"));
  EXPECT_NE(html.find("tokamak profile --model llama3.2-1b --batch 8 --moments bf16 --fp8 --fp8-lm-head "
                      "--fp8-scaling current --gpus 4 --zero 2 --out"),
            std::string::npos)
      << html.substr(html.find("tokamak profile"), 200);
}

TEST(Report, WallTimeAddsTheSessionsOfAResumedRun) {
  TempDir dir;
  std::string resumed = step_line(4, "3.0") + step_line(5, "2.9");  // elapsed_s restarts: 1 and 2
  for (const auto& [from, to] : {std::pair{"\"elapsed_s\":4", "\"elapsed_s\":1"}, {"\"elapsed_s\":5", "\"elapsed_s\":2"}})
    resumed.replace(resumed.find(from), std::string(from).size(), to);
  const std::string html = render(write_run(dir, step_line(1, "5.0") + step_line(2, "4.0") + step_line(3, "3.5") + resumed));
  EXPECT_NE(html.find(">5.0 s<"), std::string::npos);  // 3 s, then 2 s
  EXPECT_NE(html.find("2 sessions (resumed)"), std::string::npos);
}

TEST(Report, NaNValuesAreGapsInTheLines) {
  TempDir dir;
  // The trainer writes NaN as null; other writers (Python) as a bare NaN.
  const std::string log =
      step_line(1, "5.0") + step_line(2, "4.0") + step_line(3, "null") + step_line(4, "NaN") + step_line(5, "3.0");
  const std::string html = render(write_run(dir, log));
  const std::string d = series_path(svg_with_id(html, "chart-loss-step"), "train loss");
  EXPECT_EQ(path_points(d), 3);
  EXPECT_EQ(count_of(d, "M"), 2) << d;  // two runs of points: steps 1-2 and step 5
  EXPECT_EQ(d.find("nan"), std::string::npos);
  EXPECT_NE(html.find(">3.0000<"), std::string::npos);  // the final train loss
}

// A run that diverged: the trainer's last record says so. The page says at which step (not "still going"), draws
// the loss, which went to 2.5e11 before the NaN, on a log axis with the step marked, and shows the config once.
TEST(Report, DivergedRunIsNamedAndItsLossDrawnOnALogAxis) {
  TempDir dir;
  const std::string log = step_line(1, "5.0") + step_line(2, "4.0") + step_line(3, "2.5e11") +
                          R"({"step":4,"loss":null,"lr":0.004,"grad_norm":null,"diverged":true,"time":1700000000,)"
                          R"("elapsed_s":4})" "\n";
  const std::string html =
      render(write_run(dir, log, R"({"train": {"steps": 100, "seed": 987654}, "model_name": "m"})"));
  EXPECT_NE(html.find("The run diverged at step 4: its loss was not finite"), std::string::npos);
  EXPECT_EQ(html.find("still going"), std::string::npos);
  EXPECT_NE(html.find(">diverged at step 4 of 100<"), std::string::npos);
  const std::string svg = svg_with_id(html, "chart-loss-step");
  EXPECT_NE(svg.find("loss (nats/token) (log)"), std::string::npos);
  EXPECT_EQ(path_points(series_path(svg, "train loss")), 3);
  EXPECT_EQ(path_points(series_path(svg, "diverged (step 4)")), 2);
  EXPECT_EQ(count_of(html, "987654"), 1) << "the configuration is shown once";
}

TEST(Report, SingleStepAndNoValidation) {
  TempDir dir;
  const std::string html = render(write_run(dir, step_line(1, "5.5")));
  const std::string svg = svg_with_id(html, "chart-loss-step");
  EXPECT_EQ(series_path(svg, "train loss").rfind("M", 0), 0u);
  EXPECT_EQ(path_points(series_path(svg, "train loss")), 1);
  EXPECT_EQ(count_of(svg, "<circle"), 1);  // a lone point is drawn as a dot
  EXPECT_EQ(series_path(svg, "val loss"), "");
  EXPECT_NE(html.find("no validation yet"), std::string::npos);
  EXPECT_NE(html.find("config.json is missing"), std::string::npos);
}

// A data-parallel run's log: its communication per step (rank 0's and the most of any rank) and each rank's data
// wait, charted, with the run's totals as cards.
TEST(Report, CommunicationAndDataWaitOfADataParallelRun) {
  TempDir dir;
  const std::string log = data_parallel_step_line(1, 0.020, 0.005, 0.001, 0.030) +
                          data_parallel_step_line(2, 0.010, 0.005, 0.000, 0.020) + val_line(2, 4.1) +
                          data_parallel_step_line(3, 0.010, 0.005, 0.002, 0.010);
  const std::string html = render(write_run(dir, log));
  ASSERT_NE(html.find("<section id=\"communication\""), std::string::npos);
  const std::string comm = svg_with_id(html, "chart-communication");
  for (const char* series : {"collectives (rank 0)", "exposed (rank 0)", "host gathers (rank 0)",
                             "collectives (the most of any rank)", "exposed (the most of any rank)"})
    EXPECT_EQ(path_points(series_path(comm, series)), 3) << series;
  const std::string wait = svg_with_id(html, "chart-data-wait");
  EXPECT_EQ(path_points(series_path(wait, "rank 0")), 3);
  EXPECT_EQ(path_points(series_path(wait, "rank 1")), 3);
  EXPECT_EQ(series_path(wait, "rank 2"), "");
  // Three steps of 0.5 s: 40 ms of collectives on rank 0 (2.7%), 15 ms exposed (1.0%), 30 on the most exposed rank.
  EXPECT_NE(html.find(">40.0 ms<"), std::string::npos);
  EXPECT_NE(html.find("rank 0&#39;s collectives, 2.7% of the step time; host gathers 3.0 ms"), std::string::npos);
  EXPECT_NE(html.find(">1.0%<"), std::string::npos);
  EXPECT_NE(html.find("the most exposed rank of each step: 2.0%"), std::string::npos);
  EXPECT_NE(html.find("rank 1, the slowest of 2; the least rank 0, 3.0 ms"), std::string::npos);
}

// A GPU run logs each step's SM clock and power: drawn per step, with what held the clock back in the note.
TEST(Report, TheGpuClockOfEachStep) {
  TempDir dir;
  auto with_clock = [](int step, const std::string& clock, double power, const std::string& by) {
    std::string line = step_line(step, "4.0");
    line.insert(line.find("\"time\""), fmt::format("\"sm_clock_mhz\":{},\"power_w\":{},\"clock_held_back_by\":{},",
                                                    clock, power, by));
    return line;
  };
  const std::string log = with_clock(1, "1980", 300, "null") + with_clock(2, "1600", 690, "\"the power limit\"") +
                          with_clock(3, "1440", 700, "\"the power limit\"") + step_line(4, "3.9");
  const std::string html = render(write_run(dir, log));
  EXPECT_EQ(path_points(series_path(svg_with_id(html, "chart-sm-clock"), "SM clock")), 3);  // step 4 logged none
  EXPECT_NE(html.find("Power 563 W on average"), std::string::npos);
  EXPECT_NE(html.find("held back in 2 of 3 steps, most by the power limit"), std::string::npos);
  // A log without power readings has no power in the note.
  std::string no_power = with_clock(1, "1500", 0, "\"the temperature limit\"");
  no_power.replace(no_power.find("\"power_w\":0"), 11, "\"power_w\":null");
  const std::string hot = render(write_run(dir, no_power));
  EXPECT_EQ(hot.find("Power "), std::string::npos);
  EXPECT_NE(hot.find("The clock was held back in 1 of 1 steps, most by the temperature limit"), std::string::npos);
  // A run without the fields (the CPU) has no such chart.
  EXPECT_EQ(render(write_run(dir, step_line(1, "5.0") + step_line(2, "4.0"))).find("chart-sm-clock"), std::string::npos);
}

TEST(Report, EmptyLogStillMakesAPage) {
  TempDir dir;
  const std::string html = render(write_run(dir, ""));
  EXPECT_NE(html.find("holds no step yet"), std::string::npos);
  EXPECT_NE(html.find("no data yet"), std::string::npos);
}

TEST(Report, TextFromFilesIsEscaped) {
  TempDir dir;
  const std::string run =
      write_run(dir, step_line(1, "5.0"), R"({"model_name": "<script>alert('x')</script>", "device": "a & b \"c\""})");
  tk::testing::write_text(run + "/profile.json",
                          R"({"step_ms": 10, "ops": [{"name": "<img src=x>", "category": "matmul", "ms": 5}],
                              "advice": [{"title": "<b>fuse</b>", "payoff_pct": 3, "detail": "x < y"}]})");
  const std::string html = render(run);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_EQ(html.find("<b>fuse"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(html.find("a &amp; b &quot;c&quot;"), std::string::npos);
  EXPECT_NE(html.find("&lt;img src=x&gt;"), std::string::npos);
  EXPECT_NE(html.find("x &lt; y"), std::string::npos);
}

TEST(Report, StepTimeBreakdownAndMemoryPlan) {
  TempDir dir;
  const std::string run = write_run(dir, step_line(1, "5.0") + step_line(2, "4.0"));
  tk::testing::write_text(run + "/profile.json", R"({
    "device": "NVIDIA H200", "backend": "cuda", "steps": 5, "step_ms": 100, "tokens_per_step": 8192,
    "tokens_per_s": 81920, "mfu": 0.42, "hfu": 0.5, "peak_tflops": 989,
    "ceilings": {"matmul_tflops": 808, "copy_gbps": 4000, "source": "table"},
    "ops": [{"name": "linear_forward", "category": "matmul", "calls": 28, "ms": 40, "share": 0.4, "flops": 1e12,
             "bytes": 1e9, "tflops": 25, "gbps": 25, "ceiling_share": 0.03, "bound": "compute"},
            {"name": "linear_backward", "category": "matmul", "calls": 28, "ms": 20, "share": 0.2},
            {"name": "flash_attention", "category": "attention", "calls": 4, "ms": 15, "share": 0.15},
            {"name": "adamw", "category": "optimizer", "calls": 1, "ms": 5, "share": 0.05}],
    "totals": {"kernels_ms": 80, "gaps_ms": 8, "data_wait_ms": 3, "communication_ms": 4, "recompute_ms": 0,
               "unexplained_ms": 5},
    "advice": [{"title": "Raise the micro-batch", "payoff_pct": 8.5, "detail": "gaps are 12% of the step"}]})");
  tk::testing::write_text(run + "/memory.json", R"json({"device": "NVIDIA H200", "total_bytes": 3221225472,
    "capacity_bytes": 150323855360, "rows": [{"component": "parameters (bf16)", "bytes": 1073741824, "note": "0.5B"},
    {"component": "activations", "bytes": 2147483648, "note": "kept for backward"}]})json");
  const std::string html = render(run);

  // The bar: matmul holds 60 of the step's 100 ms, so 60% of the 960-wide bar.
  const std::string bar = svg_with_id(html, "bar-step-time");
  EXPECT_NE(bar.find("data-label=\"matmul\" x=\"0.0\" y=\"4\" width=\"576.0\""), std::string::npos) << bar;
  for (const char* label : {"attention", "optimizer", "host/launch gaps", "data wait", "exposed communication",
                            "unexplained"})
    EXPECT_NE(bar.find(fmt::format("data-label=\"{}\"", label)), std::string::npos) << label;
  EXPECT_NE(html.find("<code>linear_forward</code>"), std::string::npos);
  EXPECT_NE(html.find("All 4 ops"), std::string::npos);
  EXPECT_NE(html.find("Raise the micro-batch"), std::string::npos);
  EXPECT_NE(html.find("42.0%"), std::string::npos);  // MFU
  EXPECT_EQ(html.find("tokamak profile --"), std::string::npos);

  EXPECT_NE(html.find("parameters (bf16)"), std::string::npos);
  EXPECT_NE(html.find("3.00 GiB"), std::string::npos);    // the total
  EXPECT_NE(html.find("140.00 GiB"), std::string::npos);  // the capacity
  EXPECT_NE(svg_with_id(html, "bar-memory").find("data-label=\"activations\""), std::string::npos);
}

// A CPU's profile in its own units: the matmul ceiling in GFLOP/s (under 1 TFLOP/s), the op rates with their
// digits, an op faster than its ceiling counted at 100% and marked; config.json's sizes as sizes and the train
// table's keys as the flags and config.toml spell them.
TEST(Report, ACpuProfileAndTheConfigurationInTheirUnits) {
  TempDir dir;
  const std::string config = R"({"train": {"batch_tokens": 2048, "eval_every": 0}, "peak_flops": 0,
    "memory": {"activation_bytes": 162234368, "optimizer_bytes": 32000000}})";
  const std::string run = write_run(dir, step_line(1, "5.0"), config);
  tk::testing::write_text(run + "/profile.json", R"({
    "device": "cpu", "backend": "cpu", "steps": 5, "step_ms": 700, "tokens_per_step": 2048, "tokens_per_s": 2900,
    "ceilings": {"matmul_tflops": 0.09103, "copy_gbps": 26.6, "source": "measured now"},
    "ops": [{"name": "linear_backward", "category": "matmul", "calls": 16, "ms": 300, "share": 0.43, "flops": 1e10,
             "bytes": 1e8, "tflops": 0.031, "gbps": 0.271, "ceiling_share": 0.34, "bound": "compute"},
            {"name": "upload", "category": "memory", "calls": 3, "ms": 0.002, "share": 0.0, "flops": 0,
             "bytes": 5e4, "tflops": 0, "gbps": 28.67, "ceiling_share": 1.078, "bound": "memory"}]})");
  const std::string html = render(run);
  EXPECT_NE(html.find("Ceilings: matmul 91.03 GFLOP/s, copy 26.6 GB/s"), std::string::npos) << html;
  EXPECT_NE(html.find("<th class=\"num\">GFLOP/s</th>"), std::string::npos);
  EXPECT_NE(html.find("<td class=\"num\">31.0</td><td class=\"num\">0.271</td><td class=\"num\">34.0%</td>"),
            std::string::npos);
  EXPECT_NE(html.find("<td class=\"num\">28.7</td><td class=\"num\">100.0%*</td>"), std::string::npos);
  EXPECT_NE(html.find("* faster than the ceiling measured, counted at 100%"), std::string::npos);
  EXPECT_EQ(html.find("107.8%"), std::string::npos);
  EXPECT_NE(html.find("<th>batch-tokens</th>"), std::string::npos);
  EXPECT_EQ(html.find("batch_tokens"), std::string::npos);
  EXPECT_NE(html.find("<th>activation_bytes</th><td>154.72 MiB</td>"), std::string::npos) << html;
  EXPECT_NE(html.find("<td>30.52 MiB</td>"), std::string::npos);
}

TEST(Report, ADirectoryWithoutALogIsAnError) {
  TempDir dir;
  EXPECT_NE(error_of([&] { write_report(dir.path()); }).find("has no log.jsonl"), std::string::npos);
  EXPECT_NE(error_of([&] { write_report(dir.path("absent")); }).find("is not a directory"), std::string::npos);
  EXPECT_FALSE(stdfs::exists(dir.path("report.html")));
}

TEST(Report, WritesWhereAsked) {
  TempDir dir;
  const std::string run = write_run(dir, step_line(1, "5.0"));
  EXPECT_EQ(write_report(run, dir.path("elsewhere.html")), dir.path("elsewhere.html"));
  EXPECT_NE(fs::read_file(dir.path("elsewhere.html")).find("</html>"), std::string::npos);
  EXPECT_FALSE(stdfs::exists(run + "/report.html"));
}

TEST(LenientJson, ReadsBareNaNAndInfinityAsNull) {
  const auto j = parse_json_lenient(R"({"a": NaN, "b": -Infinity, "c": "NaN stays", "d": [Infinity, 1]})");
  ASSERT_FALSE(j.is_discarded());
  EXPECT_TRUE(j["a"].is_null());
  EXPECT_TRUE(j["b"].is_null());
  EXPECT_EQ(j["c"], "NaN stays");
  EXPECT_TRUE(j["d"][0].is_null());
  EXPECT_TRUE(parse_json_lenient("{\"a\": 1").is_discarded());
}

TEST(SvgChart, NiceTicks) {
  Ticks t = nice_ticks(0.13, 9.7, 6);
  EXPECT_EQ(t.values, (std::vector<double>{0, 2, 4, 6, 8, 10}));
  t = nice_ticks(3.21, 3.29, 5);
  EXPECT_DOUBLE_EQ(t.step, 0.02);
  EXPECT_NEAR(t.first, 3.2, 1e-12);
  EXPECT_NEAR(t.last, 3.3, 1e-12);
  t = nice_ticks(5, 5, 6);  // one value: still a range
  EXPECT_LT(t.first, 5);
  EXPECT_GT(t.last, 5);
  t = log_ticks(0.3, 1.5);
  EXPECT_EQ(t.values, (std::vector<double>{0.2, 0.5, 1, 2}));
  t = log_ticks(1e-3, 50);
  EXPECT_EQ(t.values, (std::vector<double>{1e-3, 1e-2, 1e-1, 1, 10, 100}));
}

TEST(SvgChart, NumberLabels) {
  EXPECT_EQ(format_number(0), "0");
  EXPECT_EQ(format_number(0.25, 0.25), "0.25");
  EXPECT_EQ(format_number(2, 0.5), "2.0");
  EXPECT_EQ(format_number(1500, 500), "1.5k");
  EXPECT_EQ(format_number(2.5e6, 5e5), "2.5M");
  EXPECT_EQ(format_number(3e-4, 1e-4), "3e-4");
  EXPECT_EQ(format_number(2.5e-5, 5e-6), "2.5e-5");
  EXPECT_EQ(format_number(3.14159), "3.14");
  EXPECT_EQ(format_number(16777216), "16.8M");
  EXPECT_EQ(format_number(std::nan("")), "NaN");
}

TEST(SvgChart, LongSeriesAreThinnedButKeepTheirSpikes) {
  LineChart c{"long", "step", "loss"};
  ChartSeries s{"loss"};
  for (int i = 0; i < 100000; i++) {
    s.x.push_back(i);
    s.y.push_back(i == 54321 ? 100.0 : 1.0 + (i % 7) * 0.01);
  }
  c.series.push_back(s);
  const std::string svg = render_line_chart(c);
  const int points = path_points(series_path(svg, "loss"));
  EXPECT_LE(points, int(kMaxDrawnPoints) + 2);
  EXPECT_GE(points, int(kMaxDrawnPoints) / 2);
  // The spike is the top of the axis: some point is drawn at the plot's top edge.
  EXPECT_EQ(count_of(svg, "<circle"), 0);
  const std::string d = series_path(svg, "loss");
  double min_y = 1e9;
  for (size_t at = 0; (at = d.find_first_of("ML", at)) != std::string::npos; at++) {
    const size_t space = d.find(' ', at);
    min_y = std::min(min_y, std::atof(d.c_str() + space + 1));
  }
  EXPECT_LT(min_y, 40);  // y grows downwards: the spike is near the top
}

TEST(SvgChart, LogAxisLeavesOutValuesItCannotDraw) {
  LineChart c{"log", "step", "grad norm"};
  c.log_y = true;
  c.series.push_back({"g", {1, 2, 3, 4}, {0.5, 0.0, -1.0, 2.0}});
  EXPECT_EQ(path_points(series_path(render_line_chart(c), "g")), 2);
}

// The binary end to end: prints the path it wrote; a directory that is not a run exits 1 with a sentence.
TEST(ReportCli, PrintsThePathOrAnError) {
  const std::string tokamak = std::string(TK_BINARY_DIR) + "/tokamak";
  if (!stdfs::exists(tokamak)) GTEST_SKIP() << tokamak << " is not built";
  TempDir dir;
  const std::string run = write_run(dir, step_line(1, "5.0"));
  const std::string out = dir.path("out.txt"), err = dir.path("err.txt");
  int status = std::system((tokamak + " report " + run + " > " + out + " 2> " + err).c_str());
  EXPECT_EQ(WEXITSTATUS(status), 0) << fs::read_file(err);
  EXPECT_EQ(fs::read_file(out), run + "/report.html\n");
  status = std::system((tokamak + " report " + dir.path() + " > " + out + " 2> " + err).c_str());
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_NE(fs::read_file(err).find("has no log.jsonl"), std::string::npos);
}

}  // namespace
}  // namespace tk::report
