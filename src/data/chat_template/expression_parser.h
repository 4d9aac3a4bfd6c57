// The expression half of the chat template parser (parser.cpp holds the statements): recursive descent over the
// tokens, one function per level of Jinja's precedence (lowest first: conditional, or, and, not, comparison, + -, ~,
// * / // %, **, unary, then primaries with their postfixes, filters and tests). Included by parser.cpp only.
#pragma once
#include <cerrno>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/chat_template/ast.h"
#include "data/chat_template/builtins.h"
#include "data/chat_template/lexer.h"

namespace tk::jinja {

class ExpressionParser {
 public:
  ExpressionParser(const std::vector<Token>& tokens, const std::string& name) : t_(tokens), name_(name) {}

 protected:
  using T = Token::Type;

  [[noreturn]] void error(const std::string& what, int line) const {
    fail("chat template {}, line {}: {}", name_, line, what);
  }
  [[noreturn]] void unexpected(const std::string& wanted) const {
    const Token& t = peek();
    const std::string found = t.type == T::End        ? "the end of the template"
                              : t.type == T::BlockEnd ? "'%}'"
                              : t.type == T::VarEnd   ? "'}}'"
                              : t.type == T::String   ? "a string"
                                                      : "'" + t.text + "'";
    error(fmt::format("expected {}, found {}", wanted, found), t.line);
  }

  const Token& peek(size_t ahead = 0) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
  const Token& next() { return t_[std::min(i_++, t_.size() - 1)]; }
  bool is_op(const char* op, size_t ahead = 0) const {
    return peek(ahead).type == T::Operator && peek(ahead).text == op;
  }
  bool is_name(const char* n, size_t ahead = 0) const { return peek(ahead).type == T::Name && peek(ahead).text == n; }
  bool take_op(const char* op) {
    if (!is_op(op)) return false;
    i_++;
    return true;
  }
  bool take_name(const char* n) {
    if (!is_name(n)) return false;
    i_++;
    return true;
  }
  void expect_op(const char* op) {
    if (!take_op(op)) unexpected(fmt::format("'{}'", op));
  }
  std::string expect_name() {
    if (peek().type != T::Name) unexpected("a name");
    return next().text;
  }
  void expect_block_end() {
    if (peek().type != T::BlockEnd) unexpected("the end of the tag, '%}'");
    i_++;
  }

  static ExprPtr make(Expr::Kind k, int line, std::vector<ExprPtr> args = {}, std::string name = {}) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    e->args = std::move(args);
    e->name = std::move(name);
    return e;
  }
  static std::vector<ExprPtr> two(ExprPtr a, ExprPtr b) {
    std::vector<ExprPtr> v;
    v.push_back(std::move(a));
    v.push_back(std::move(b));
    return v;
  }
  static std::vector<ExprPtr> one(ExprPtr a) {
    std::vector<ExprPtr> v;
    v.push_back(std::move(a));
    return v;
  }



  // Expressions separated by commas make a tuple (`{{ a, b }}`, `for x in a, b`); one alone is itself.
  ExprPtr tuple(bool with_condexpr) {
    const int line = peek().line;
    std::vector<ExprPtr> items;
    bool comma = false;
    for (;;) {
      if (!items.empty()) {
        if (!take_op(",")) break;
        comma = true;
        if (at_expression_end()) break;
      }
      items.push_back(with_condexpr ? expression(true) : or_expr());
    }
    if (items.size() == 1 && !comma) return std::move(items[0]);
    return make(Expr::Kind::Tuple, line, std::move(items));
  }

  bool at_expression_end() const {
    const Token& t = peek();
    return t.type == T::VarEnd || t.type == T::BlockEnd || t.type == T::End || is_op(")") || is_op("]") ||
           is_op("}") || is_name("if") || is_name("in");
  }

  ExprPtr expression(bool with_condexpr) {
    ExprPtr e = or_expr();
    while (with_condexpr && is_name("if")) {
      const int line = next().line;
      ExprPtr cond = or_expr();
      ExprPtr other = take_name("else") ? expression(true) : nullptr;
      std::vector<ExprPtr> args;
      args.push_back(std::move(cond));
      args.push_back(std::move(e));
      args.push_back(std::move(other));
      e = make(Expr::Kind::Conditional, line, std::move(args));
    }
    return e;
  }

  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (is_name("or")) {
      const int line = next().line;
      e = make(Expr::Kind::Or, line, two(std::move(e), and_expr()));
    }
    return e;
  }

  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (is_name("and")) {
      const int line = next().line;
      e = make(Expr::Kind::And, line, two(std::move(e), not_expr()));
    }
    return e;
  }

  ExprPtr not_expr() {
    if (is_name("not")) {
      const int line = next().line;
      return make(Expr::Kind::Not, line, one(not_expr()));
    }
    return compare();
  }

  ExprPtr compare() {
    const int line = peek().line;
    ExprPtr first = math1();
    std::vector<ExprPtr> operands;
    std::vector<std::string> ops;
    for (;;) {
      std::string op;
      static const char* const kOps[] = {"==", "!=", "<", "<=", ">", ">="};
      for (const char* o : kOps)
        if (is_op(o)) op = o;
      if (!op.empty()) {
        i_++;
      } else if (is_name("in")) {
        i_++;
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        i_ += 2;
        op = "not in";
      } else {
        break;
      }
      ops.push_back(op);
      operands.push_back(math1());
    }
    if (ops.empty()) return first;
    auto e = std::make_unique<Expr>();
    e->kind = Expr::Kind::Compare;
    e->line = line;
    e->args.push_back(std::move(first));
    for (auto& o : operands) e->args.push_back(std::move(o));
    e->ops = std::move(ops);
    return e;
  }

  ExprPtr binary_level(ExprPtr (ExpressionParser::*operand)(), std::initializer_list<const char*> ops) {
    ExprPtr e = (this->*operand)();
    for (;;) {
      const char* found = nullptr;
      for (const char* o : ops)
        if (is_op(o)) found = o;
      if (!found) return e;
      const int line = next().line;
      e = make(Expr::Kind::Binary, line, two(std::move(e), (this->*operand)()), found);
    }
  }
  ExprPtr math1() { return binary_level(&ExpressionParser::concat, {"+", "-"}); }
  ExprPtr concat() { return binary_level(&ExpressionParser::math2, {"~"}); }
  ExprPtr math2() { return binary_level(&ExpressionParser::power, {"*", "/", "//", "%"}); }
  ExprPtr power() { return binary_level(&ExpressionParser::unary_filtered, {"**"}); }
  ExprPtr unary_filtered() { return unary(true); }

  ExprPtr unary(bool with_filter) {
    const int line = peek().line;
    ExprPtr e;
    if (take_op("-")) {
      e = make(Expr::Kind::Negate, line, one(unary(false)));
    } else if (take_op("+")) {
      e = make(Expr::Kind::Plus, line, one(unary(false)));
    } else {
      e = postfix(primary());
    }
    return with_filter ? filters_and_tests(std::move(e)) : std::move(e);
  }

  ExprPtr primary() {
    const Token& t = peek();
    const int line = t.line;
    if (t.type == T::Name) {
      i_++;
      const std::string& n = t.text;
      if (n == "true" || n == "True") return literal(Value(true), line);
      if (n == "false" || n == "False") return literal(Value(false), line);
      if (n == "none" || n == "None") return literal(Value::none(), line);
      return make(Expr::Kind::Name, line, {}, n);
    }
    if (t.type == T::String) {
      std::string s;
      while (peek().type == T::String) s += next().text;  // adjacent literals join, as in Python
      return literal(Value(std::move(s)), line);
    }
    if (t.type == T::Integer) {
      i_++;
      errno = 0;
      char* end = nullptr;
      const long long v = std::strtoll(t.text.c_str(), &end, 10);
      if (errno == ERANGE) error(fmt::format("the integer {} is too large (at most 2^63 - 1)", t.text), line);
      return literal(Value(int64_t(v)), line);
    }
    if (t.type == T::Float) {
      i_++;
      return literal(Value(std::strtod(t.text.c_str(), nullptr)), line);
    }
    if (take_op("(")) {
      if (take_op(")")) return make(Expr::Kind::Tuple, line);
      ExprPtr e = tuple(true);
      expect_op(")");
      return e;
    }
    if (take_op("[")) {
      std::vector<ExprPtr> items;
      while (!take_op("]")) {
        if (!items.empty()) {
          expect_op(",");
          if (take_op("]")) break;
        }
        items.push_back(expression(true));
      }
      return make(Expr::Kind::List, line, std::move(items));
    }
    if (take_op("{")) {
      std::vector<ExprPtr> items;
      while (!take_op("}")) {
        if (!items.empty()) {
          expect_op(",");
          if (take_op("}")) break;
        }
        items.push_back(expression(true));
        expect_op(":");
        items.push_back(expression(true));
      }
      return make(Expr::Kind::Dict, line, std::move(items));
    }
    unexpected("an expression");
  }

  static ExprPtr literal(Value v, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = Expr::Kind::Literal;
    e->line = line;
    e->value = std::move(v);
    return e;
  }

  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      const int line = peek().line;
      if (take_op(".")) {
        if (peek().type == T::Integer) {
          ExprPtr index = literal(Value(int64_t(std::strtoll(next().text.c_str(), nullptr, 10))), line);
          e = make(Expr::Kind::Item, line, two(std::move(e), std::move(index)));
        } else {
          e = make(Expr::Kind::Attribute, line, one(std::move(e)), expect_name());
        }
      } else if (take_op("[")) {
        e = subscript(std::move(e), line);
      } else if (is_op("(")) {
        e = call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr subscript(ExprPtr target, int line) {
    auto bound = [&]() -> ExprPtr {
      if (is_op(":") || is_op("]")) return nullptr;
      return expression(true);
    };
    ExprPtr start = bound();
    if (!take_op(":")) {
      if (is_op(",")) error("subscripts with several items (a[x, y]) are not supported", line);
      expect_op("]");
      return make(Expr::Kind::Item, line, two(std::move(target), std::move(start)));
    }
    ExprPtr stop = bound(), step;
    if (take_op(":")) step = bound();
    expect_op("]");
    std::vector<ExprPtr> args;
    args.push_back(std::move(target));
    args.push_back(std::move(start));
    args.push_back(std::move(stop));
    args.push_back(std::move(step));
    return make(Expr::Kind::Slice, line, std::move(args));
  }

  // (args): positional, then name=value; *args and **kwargs are refused.
  void call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!take_op(")")) {
      if (!first) {
        expect_op(",");
        if (take_op(")")) break;
      }
      first = false;
      if (is_op("*") || is_op("**")) error("*args and **kwargs in calls are not supported", peek().line);
      if (peek().type == T::Name && is_op("=", 1)) {
        std::string key = next().text;
        i_++;
        e.keywords.emplace_back(std::move(key), expression(true));
      } else {
        if (!e.keywords.empty()) error("a positional argument after a keyword argument", peek().line);
        e.args.push_back(expression(true));
      }
    }
  }

  ExprPtr call(ExprPtr callee) {
    auto e = std::make_unique<Expr>();
    e->kind = Expr::Kind::Call;
    e->line = peek().line;
    e->args.push_back(std::move(callee));
    call_args(*e);
    return e;
  }

  // `| name(args)` with args[0] the filtered value (null for a block's filters).
  ExprPtr filter(ExprPtr input) {
    auto e = std::make_unique<Expr>();
    e->kind = Expr::Kind::Filter;
    e->line = peek().line;
    e->name = dotted_name();
    if (!has_filter(e->name))
      error(fmt::format("no filter named '{}' (tokamak's chat templates know the filters of the Llama 3, Qwen2.5 "
                        "and Qwen3 templates and the common ones of Jinja)",
                        e->name),
            e->line);
    e->args.push_back(std::move(input));
    if (is_op("(")) call_args(*e);
    return e;
  }

  std::string dotted_name() {
    std::string n = expect_name();
    while (is_op(".") && peek(1).type == T::Name) {
      i_++;
      n += "." + next().text;
    }
    return n;
  }

  ExprPtr filters_and_tests(ExprPtr e) {
    for (;;) {
      if (take_op("|")) {
        e = filter(std::move(e));
      } else if (is_name("is")) {
        e = test(std::move(e));
      } else if (is_op("(")) {
        e = call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr test(ExprPtr input) {
    auto e = std::make_unique<Expr>();
    e->kind = Expr::Kind::Test;
    e->line = next().line;  // is
    e->negated = take_name("not");
    e->name = dotted_name();
    if (!has_test(e->name)) error(fmt::format("no test named '{}'", e->name), e->line);
    e->args.push_back(std::move(input));
    if (is_op("(")) {
      call_args(*e);
    } else {
      const Token& t = peek();
      const bool arg_start = (t.type == T::Name || t.type == T::String || t.type == T::Integer ||
                              t.type == T::Float || is_op("(") || is_op("[") || is_op("{")) &&
                             !is_name("else") && !is_name("or") && !is_name("and");
      if (arg_start) {
        if (is_name("is")) error("tests cannot be chained with is", t.line);
        e->args.push_back(postfix(primary()));
      }
    }
    return e;
  }


  const std::vector<Token>& t_;
  const std::string& name_;
  size_t i_ = 0;
};

}  // namespace tk::jinja
