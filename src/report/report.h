// `tokamak report`: one self-contained HTML page about a run directory: a summary, loss, throughput
// and optimizer charts, where a step's time goes (profile.json), the memory plan (memory.json) and the
// resolved config. Inline CSS and SVG only: it opens offline, from a file, and prints.
#pragma once
#include <string>

#include "report/run_files.h"

namespace tk::report {

// The page for files already read.
std::string render_report(const RunFiles& run);

// Reads RUN_DIR and writes its page atomically to `out` ("" = RUN_DIR/report.html); returns the path
// written. A tk::Error when RUN_DIR holds no log.jsonl.
std::string write_report(const std::string& run_dir, const std::string& out = "");

}  // namespace tk::report
