// Subcommand registry: each src/cli/<name>.cpp registers itself with a static Command object,
// declaring its options on the CLI11 subcommand and returning the function that runs it.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace tk::dist {
class Communicator;
}

namespace tk::cli {

// The communicator main() connected for a command of a run of many ranks (docs/distributed.md); nullptr for one
// process.
tk::dist::Communicator* communicator();

using Runner = std::function<int()>;
using Setup = std::function<Runner(CLI::App&)>;

struct Command {
  Command(std::string name, std::string help, Setup setup);
};

struct Registered {
  std::string name, help;
  Setup setup;
};
std::vector<Registered>& registry();

}  // namespace tk::cli
