// The report's table sections, each drawn from one file of the run directory: where a step's time
// goes (profile.json), the memory plan (memory.json, else what config.json and the log record), and
// the resolved config (config.json). Each says what to do when its file is missing.
#pragma once
#include <string>

#include "report/run_files.h"

namespace tk::report {

std::string time_section(const RunFiles& run);
std::string memory_section(const RunFiles& run);
std::string config_section(const RunFiles& run);

}  // namespace tk::report
