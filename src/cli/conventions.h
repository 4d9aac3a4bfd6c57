// The conventions every command's command line keeps: a mistake in how a command was called exits 2 with
// "error: ..." (a command that ran and failed exits 1); an on/off flag has a --no- form and --help says which
// is the default; enumerated values are checked while parsing, so a misspelt one is a usage error too.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"

namespace tk::cli {

constexpr int kUsageExit = 2;    // the command line (or a config file) is wrong: nothing ran
constexpr int kFailureExit = 1;  // the command ran and failed

struct UsageError : Error {
  using Error::Error;
};

template <class... Args>
[[noreturn]] void usage_error(fmt::format_string<Args...> f, Args&&... args) {
  throw UsageError(fmt::format(f, std::forward<Args>(args)...));
}

// --NAME and --no-NAME for one bool; --help shows both names and the default (on or off).
CLI::Option* add_on_off_flag(CLI::App& app, const std::string& name, bool& value, const std::string& help);

// A flag takes no value: it is given or not (and a --no- form, if it has one, given or not).
bool is_flag(const CLI::Option& opt);

// The option's value must be one of `values` (checked while parsing; --help lists them).
CLI::Option* one_of(CLI::Option* opt, const std::vector<std::string>& values);

// The option's value must be what a function of the library parses without a tk::Error (checked while parsing; the
// error's text is the option's).
CLI::Validator parsed_by(std::function<void(const std::string&)> parse);

// How --help shows options: a flag's names without CLI11's {false} marks (which read as its default).
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_option_name(const CLI::Option* opt, bool positional) const override;
};

}  // namespace tk::cli
