// Generated text given out piece by piece (generated_text.h): each token's decoded text is searched for the stop
// strings from where it was last given out, and what could still turn into one is held back.
#include "data/generated_text.h"

#include <algorithm>

namespace tk {
namespace {

// The length of the longest prefix of s that does not end inside a UTF-8 sequence.
size_t complete_utf8_prefix(const std::string& s) {
  for (size_t back = 1; back <= 4 && back <= s.size(); back++) {
    const unsigned char c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back for the lead byte
    const size_t need = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return back >= need ? s.size() : s.size() - back;
  }
  return s.size();  // not UTF-8 at all: the bytes as they are
}

// The longest tail of text[from, end) that is the beginning of a stop string (and so may become one).
size_t possible_stop_start(const std::string& text, size_t from, size_t end, const std::vector<std::string>& stops) {
  size_t held = 0;
  for (const std::string& stop : stops)
    for (size_t len = std::min(stop.size() - 1, end - from); len > held; len--)
      if (text.compare(end - len, len, stop, 0, len) == 0) {
        held = len;
        break;
      }
  return held;
}

}  // namespace

GeneratedText::GeneratedText(const Tokenizer& tok, std::vector<std::string> stops) : tok_(tok) {
  for (std::string& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string GeneratedText::add(int32_t token) {
  if (stopped_) return "";
  tokens_.push_back(token);
  const std::string text = tok_.decode(tokens_);
  // Nothing given out can be the start of a stop string, so none starts before printed_.
  size_t stop_at = std::string::npos;
  for (const std::string& stop : stops_) stop_at = std::min(stop_at, text.find(stop, printed_));
  size_t ready;
  if (stop_at != std::string::npos) {
    stopped_ = true;
    ready = stop_at;
  } else {
    ready = complete_utf8_prefix(text);
    ready -= possible_stop_start(text, printed_, std::max(ready, printed_), stops_);
  }
  if (ready <= printed_) return "";
  std::string piece = text.substr(printed_, ready - printed_);
  printed_ = ready;
  return piece;
}

std::string GeneratedText::rest() const {
  if (stopped_) return "";
  const std::string text = tok_.decode(tokens_);
  return printed_ < text.size() ? text.substr(printed_) : "";
}

std::string unescape_typed(const std::string& typed) {
  std::string out;
  for (size_t i = 0; i < typed.size(); i++) {
    const char next = i + 1 < typed.size() ? typed[i + 1] : '\0';
    if (typed[i] == '\\' && (next == 'n' || next == 't' || next == '\\')) {
      out += next == 'n' ? '\n' : next == 't' ? '\t' : '\\';
      i++;
    } else {
      out += typed[i];
    }
  }
  return out;
}

}  // namespace tk
