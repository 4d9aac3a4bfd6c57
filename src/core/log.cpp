// Logging to stderr: warnings and errors say so; info lines are plain so that they read as output.
#include "core/log.h"

#include <atomic>
#include <mutex>

namespace tk::log {
namespace {
std::atomic<Level> g_level{Level::Info};
std::mutex g_mu;
}  // namespace

Level level() { return g_level.load(); }
void set_level(Level l) { g_level.store(l); }

void write(Level l, const std::string& msg) {
  std::lock_guard<std::mutex> lock(g_mu);
  const char* prefix = l == Level::Warn ? "warning: " : l == Level::Error ? "error: " : l == Level::Debug ? "debug: " : "";
  std::fprintf(stderr, "%s%s\n", prefix, msg.c_str());
  std::fflush(stderr);
}

}  // namespace tk::log
