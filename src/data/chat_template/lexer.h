// The lexer of chat templates: template text cut into data and the tokens of {{ }} and {% %} tags, with Jinja's
// whitespace control as transformers configures it (trim_blocks and lstrip_blocks on, `-` and `+` on tags, one
// trailing newline of the template dropped, newlines normalised to \n); comments and {% raw %} are resolved here.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tk::jinja {

struct Token {
  enum class Type : uint8_t {
    Data,         // template text, printed as it is
    VarBegin,     // {{
    VarEnd,       // }}
    BlockBegin,   // {%
    BlockEnd,     // %}
    Name,
    String,       // text: the literal's value, escapes resolved
    Integer,      // text: the digits, underscores removed
    Float,
    Operator,     // text: one of + - * / // % ** ~ == != < <= > >= = . : | , ( ) [ ] { } ;
    End,
  };
  Type type;
  std::string text;
  int line = 1;
};

// Throws tk::Error "chat template NAME, line N: ..." for an unterminated tag, comment or string, or a character
// that is no part of an expression.
std::vector<Token> lex_template(std::string_view source, const std::string& name);

}  // namespace tk::jinja
