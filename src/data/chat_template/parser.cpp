// The statement half of the chat template parser (parser.h): if, for, set, macro, filter, break, continue and
// generation blocks, each with its end tag; the expressions inside them are expression_parser.h's.
#include "data/chat_template/parser.h"

#include "data/chat_template/expression_parser.h"

namespace tk::jinja {
namespace {

class Parser : public ExpressionParser {
 public:
  using ExpressionParser::ExpressionParser;

  ParsedTemplate run() {
    ParsedTemplate out;
    out.body = body({});
    TK_CHECK(peek().type == T::End, "internal error: the template parser stopped before the end");
    out.has_generation = has_generation_;
    return out;
  }

 private:

  // Statements until a block tag whose keyword is one of `ends` (left unread) or the end of the template.
  Body body(std::initializer_list<const char*> ends) {
    Body out;
    for (;;) {
      const Token& t = peek();
      if (t.type == T::End) {
        if (ends.size() > 0) error(fmt::format("the template ends inside a block: expected {{% {} %}}", *ends.begin()), t.line);
        return out;
      }
      if (t.type == T::Data) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::Data;
        n->line = t.line;
        n->text = t.text;
        out.push_back(std::move(n));
        i_++;
      } else if (t.type == T::VarBegin) {
        i_++;
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::Output;
        n->line = t.line;
        n->expr = tuple(true);
        if (peek().type != T::VarEnd) unexpected("the end of the expression, '}}'");
        i_++;
        out.push_back(std::move(n));
      } else {  // BlockBegin
        const Token& keyword = peek(1);
        for (const char* end : ends)
          if (keyword.type == T::Name && keyword.text == end) return out;
        i_++;
        out.push_back(statement());
      }
    }
  }

  NodePtr statement() {
    const Token& kw = peek();
    if (kw.type != T::Name) unexpected("a statement keyword");
    const std::string& k = kw.text;
    const int line = kw.line;
    i_++;
    auto n = std::make_unique<Node>();
    n->line = line;
    if (k == "if") {
      n->kind = Node::Kind::If;
      for (;;) {
        ExprPtr cond = tuple(false);
        expect_block_end();
        Body b = body({"elif", "else", "endif"});
        n->branches.emplace_back(std::move(cond), std::move(b));
        i_++;  // {%
        const std::string which = next().text;
        if (which == "elif") continue;
        if (which == "else") {
          expect_block_end();
          n->else_body = body({"endif"});
          i_ += 2;
        }
        expect_block_end();
        return n;
      }
    }
    if (k == "for") {
      n->kind = Node::Kind::For;
      n->target = assign_target(false);
      if (!take_name("in")) unexpected("'in'");
      n->expr = tuple(false);
      if (take_name("if")) n->condition = expression(true);
      if (is_name("recursive")) error("recursive for loops are not supported in chat templates", line);
      expect_block_end();
      n->body = body({"else", "endfor"});
      i_++;
      if (next().text == "else") {
        expect_block_end();
        n->else_body = body({"endfor"});
        i_ += 2;
      }
      expect_block_end();
      return n;
    }
    if (k == "set") {
      n->target = assign_target(true);
      if (take_op("=")) {
        n->kind = Node::Kind::Set;
        n->expr = tuple(true);
        expect_block_end();
        return n;
      }
      if (!n->target.attribute.empty() || n->target.unpack) unexpected("'='");
      n->kind = Node::Kind::SetBlock;
      while (take_op("|")) n->filters.push_back(filter(nullptr));
      expect_block_end();
      n->body = body({"endset"});
      i_ += 2;
      expect_block_end();
      return n;
    }
    if (k == "macro") {
      n->kind = Node::Kind::Macro;
      auto m = std::make_shared<Macro>();
      m->name = expect_name();
      expect_op("(");
      while (!take_op(")")) {
        if (!m->params.empty()) expect_op(",");
        if (take_op(")")) break;
        std::string param = expect_name();
        ExprPtr def;
        if (take_op("=")) def = expression(true);
        m->params.emplace_back(std::move(param), std::move(def));
      }
      expect_block_end();
      m->body = body({"endmacro"});
      i_ += 2;
      expect_block_end();
      n->macro = std::move(m);
      return n;
    }
    if (k == "break" || k == "continue") {
      n->kind = k == "break" ? Node::Kind::Break : Node::Kind::Continue;
      expect_block_end();
      return n;
    }
    if (k == "generation") {
      n->kind = Node::Kind::Generation;
      has_generation_ = true;
      expect_block_end();
      n->body = body({"endgeneration"});
      i_ += 2;
      expect_block_end();
      return n;
    }
    if (k == "filter") {
      n->kind = Node::Kind::FilterBlock;
      do n->filters.push_back(filter(nullptr));
      while (take_op("|"));
      expect_block_end();
      n->body = body({"endfilter"});
      i_ += 2;
      expect_block_end();
      return n;
    }
    static const char* const kEnds[] = {"endif", "endfor", "endmacro", "endset", "endgeneration", "endfilter",
                                        "elif", "else"};
    for (const char* e : kEnds)
      if (k == e) error(fmt::format("{{% {} %}} without the block it would close", k), line);
    error(fmt::format("the statement {{% {} %}} is not supported in chat templates (tokamak renders if, for, set, "
                      "macro, filter, break, continue, generation and raw)",
                      k),
          line);
  }

  Target assign_target(bool allow_attribute) {
    Target t;
    const bool parens = take_op("(");
    t.names.push_back(expect_name());
    if (allow_attribute && !parens && take_op(".")) {
      t.attribute = expect_name();
      return t;
    }
    while (take_op(",")) {
      if (peek().type != T::Name || is_name("in")) break;
      t.names.push_back(expect_name());
      t.unpack = true;
    }
    if (parens) {
      t.unpack = true;
      expect_op(")");
    }
    return t;
  }

  bool has_generation_ = false;
};

}  // namespace

ParsedTemplate parse_template(const std::vector<Token>& tokens, const std::string& name) {
  return Parser(tokens, name).run();
}

}  // namespace tk::jinja
