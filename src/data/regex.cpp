// PCRE2 compilation and matching for tk::Regex (see regex.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/regex.h"

#include <pcre2.h>

#include <cctype>

#include "core/error.h"

namespace tk {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

// Per-thread matching state: a match-data block for the whole match and group 1, and a JIT stack
// large enough for long runs of one character class (megabytes of digits or spaces).
struct MatchScratch {
  pcre2_match_data* data = pcre2_match_data_create(2, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);

  MatchScratch() {
    TK_CHECK(data && stack && context, "out of memory allocating regex match state");
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchScratch() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

MatchScratch& scratch() {
  thread_local MatchScratch s;
  return s;
}

}  // namespace

Regex::Regex(const std::string& pattern) {
  // UCP: \d, \w and case-insensitive matching follow Unicode. DOLLAR_ENDONLY: `$` is the end of
  // the text, as in Rust (tiktoken's patterns end runs of spaces with \s++$), not before a final \n.
  const uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY;
  int err = 0;
  PCRE2_SIZE err_at = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &err, &err_at, nullptr);
  if (!code) fail("regex does not compile ({} at offset {}): {}", pcre2_message(err), err_at, pattern);
  code_ = code;
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;  // without JIT (rare platforms) it is slower, not wrong
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

std::optional<Regex::Span> Regex::find(std::string_view text, size_t from, Span* group1) const {
  auto* code = static_cast<pcre2_code*>(code_);
  MatchScratch& ms = scratch();
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  int rc = jit_ ? pcre2_jit_match(code, subject, text.size(), from, 0, ms.data, ms.context)
                : pcre2_match(code, subject, text.size(), from, 0, ms.data, ms.context);
  if (rc == PCRE2_ERROR_NOMATCH) return std::nullopt;
  if (rc < 0) fail("regex matching failed on a {}-byte text: {}", text.size(), pcre2_message(rc));
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(ms.data);
  if (group1) *group1 = {ov[2], ov[3]};
  return Span{ov[0], ov[1]};
}

std::string regex_escape(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (uint8_t(c) < 0x80 && !std::isalnum(uint8_t(c))) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace tk
