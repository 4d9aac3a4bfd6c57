// The parser of chat templates: lexer tokens to statements and expressions (ast.h), with Jinja's grammar and
// operator precedence. A tag or construct outside the subset tokamak renders is a tk::Error naming the line.
#pragma once
#include <string>
#include <vector>

#include "data/chat_template/ast.h"
#include "data/chat_template/lexer.h"

namespace tk::jinja {

struct ParsedTemplate {
  Body body;
  bool has_generation = false;  // holds {% generation %} blocks
};

ParsedTemplate parse_template(const std::vector<Token>& tokens, const std::string& name);

}  // namespace tk::jinja
