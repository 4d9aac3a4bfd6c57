// The added-token matcher (see added_tokens.h): one PCRE2 alternation of the tokens' literal texts,
// longest first, so that leftmost-first matching gives the leftmost-longest token.
#include "data/added_tokens.h"

#include <algorithm>

namespace tk {

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens) {
  for (const AddedToken& t : tokens) ids_.emplace(t.text, t.id);
  all_ = alternation(tokens, true);
  ordinary_ = alternation(tokens, false);
}

// (?|...) numbers every alternative's group 1 the same, so group 1 is the literal text whichever
// token matched; whitespace taken in by lstrip/rstrip lies outside it.
std::unique_ptr<Regex> AddedTokenMatcher::alternation(const std::vector<AddedToken>& tokens, bool with_special) {
  std::vector<const AddedToken*> chosen;
  for (const AddedToken& t : tokens)
    if ((with_special || !t.special) && !t.text.empty()) chosen.push_back(&t);
  if (chosen.empty()) return nullptr;
  std::stable_sort(chosen.begin(), chosen.end(), [](auto* a, auto* b) { return a->text.size() > b->text.size(); });
  std::string pattern = "(?|";
  for (const AddedToken* t : chosen) {
    if (pattern.size() > 3) pattern += '|';
    if (t->lstrip) pattern += "\\p{White_Space}*";
    pattern += "(" + regex_escape(t->text) + ")";
    if (t->rstrip) pattern += "\\p{White_Space}*";
  }
  pattern += ")";
  return std::make_unique<Regex>(pattern);
}

std::optional<AddedTokenMatcher::Match> AddedTokenMatcher::find(std::string_view text, size_t from,
                                                                bool allow_special) const {
  const Regex* re = allow_special ? all_.get() : ordinary_.get();
  if (!re) return std::nullopt;
  Regex::Span literal;
  auto m = re->find(text, from, &literal);
  if (!m) return std::nullopt;
  auto it = ids_.find(std::string(text.substr(literal.begin, literal.end - literal.begin)));
  return Match{m->begin, m->end, it->second};
}

}  // namespace tk
