// Errors: one exception type whose message is a sentence for the user, and the checks that throw it.
// The CLI catches tk::Error at the top, prints "error: <message>" and exits non-zero.
#pragma once
#include <fmt/format.h>
#include <stdexcept>
#include <string>

namespace tk {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace tk

// TK_CHECK(cond, "format {}", args...): throws tk::Error with the formatted message when cond is false.
#define TK_CHECK(cond, ...)          \
  do {                               \
    if (!(cond)) ::tk::fail(__VA_ARGS__); \
  } while (0)
