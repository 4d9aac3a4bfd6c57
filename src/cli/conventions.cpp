// The command line's shared conventions (conventions.h): on/off flags, checked enumerations, and the help
// formatter that shows a flag's names as they are typed.
#include "cli/conventions.h"

namespace tk::cli {

bool is_flag(const CLI::Option& opt) { return opt.get_expected_max() == 0; }

CLI::Option* add_on_off_flag(CLI::App& app, const std::string& name, bool& value, const std::string& help) {
  return app.add_flag("--" + name + ",!--no-" + name, value, help)
      ->option_text(value ? "(default: on)" : "(default: off)");
}

CLI::Option* one_of(CLI::Option* opt, const std::vector<std::string>& values) {
  return opt->check(CLI::IsMember(values));
}

std::string HelpFormatter::make_option_name(const CLI::Option* opt, bool positional) const {
  if (positional || !is_flag(*opt)) return CLI::Formatter::make_option_name(opt, positional);
  std::vector<std::string> names;
  for (const std::string& s : opt->get_snames()) names.push_back("-" + s);
  for (const std::string& l : opt->get_lnames()) names.push_back("--" + l);
  return CLI::detail::join(names);
}

CLI::Validator parsed_by(std::function<void(const std::string&)> parse) {
  return CLI::Validator(
      [parse](std::string& value) {
        try {
          parse(value);
        } catch (const Error& e) {
          return std::string(e.what());
        }
        return std::string();
      },
      "");
}

}  // namespace tk::cli
