// `tokamak report RUN_DIR`: writes one self-contained HTML page about a run (loss, throughput, where
// the time and memory go, the config) and prints its path; docs/report.md says what it shows.
#include <memory>

#include <fmt/format.h>

#include "cli/command.h"
#include "report/report.h"

namespace {

struct ReportArgs {
  std::string run_dir, out;
};

tk::cli::Runner setup_report(CLI::App& app) {
  auto a = std::make_shared<ReportArgs>();
  app.add_option("run_dir", a->run_dir, "Run directory (the --out of tokamak train or profile)")->required();
  app.add_option("--out", a->out, "Where to write the page (default: RUN_DIR/report.html)");
  return [a] {
    fmt::print("{}\n", tk::report::write_report(a->run_dir, a->out));
    return 0;
  };
}

tk::cli::Command report_cmd("report", "One self-contained HTML page about a run: loss, throughput, time and memory",
                            setup_report);

}  // namespace
