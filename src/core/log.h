// Logging to stderr with a level prefix; stdout is kept for the command's own output (ids, JSON).
#pragma once
#include <fmt/format.h>
#include <cstdio>

namespace tk::log {

enum class Level { Debug, Info, Warn, Error };
Level level();
void set_level(Level l);

void write(Level l, const std::string& msg);

template <class... A> void debug(fmt::format_string<A...> f, A&&... a) {
  if (level() <= Level::Debug) write(Level::Debug, fmt::format(f, std::forward<A>(a)...));
}
template <class... A> void info(fmt::format_string<A...> f, A&&... a) {
  if (level() <= Level::Info) write(Level::Info, fmt::format(f, std::forward<A>(a)...));
}
template <class... A> void warn(fmt::format_string<A...> f, A&&... a) {
  if (level() <= Level::Warn) write(Level::Warn, fmt::format(f, std::forward<A>(a)...));
}
template <class... A> void error(fmt::format_string<A...> f, A&&... a) {
  write(Level::Error, fmt::format(f, std::forward<A>(a)...));
}

}  // namespace tk::log
