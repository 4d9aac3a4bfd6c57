// The renderer of a parsed chat template: runs its statements with Jinja's scoping (each for-loop iteration and
// each macro call in a scope of its own; if-blocks in the enclosing one) and returns the text, with the spans that
// {% generation %} blocks printed.
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "data/chat_template/parser.h"
#include "data/chat_template/value.h"

namespace tk::jinja {

struct RenderOutput {
  std::string text;
  std::vector<std::pair<size_t, size_t>> generation;  // [begin, end) byte offsets of each {% generation %} block
};

// `variables` are the template's context (messages, tools, ...), beside Jinja's globals range, dict and namespace.
// Any error is a tk::Error "chat template NAME, line N: ...".
RenderOutput render_template(const ParsedTemplate& parsed, const std::string& name, const Dict& variables);

}  // namespace tk::jinja
