// The parsed form of a chat template: statements (text, output, if, for, set, macro, generation, ...) holding
// expressions. Made once by the parser and only read afterwards, so one template renders on many threads at once.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/chat_template/value.h"

namespace tk::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<const Expr>;

struct Expr {
  enum class Kind {
    Literal,      // value
    Name,         // name
    List,         // args: the items
    Tuple,        // args: the items
    Dict,         // args: key, value, key, value, ...
    Attribute,    // args[0].name
    Item,         // args[0][args[1]]
    Slice,        // args[0][args[1]:args[2]:args[3]], a missing bound a null pointer
    Call,         // args[0](args[1..], keywords)
    Filter,       // args[0] | name(args[1..], keywords)
    Test,         // args[0] is [not] name(args[1..], keywords); negated
    Not,          // not args[0]
    Negate,       // -args[0]
    Plus,         // +args[0]
    Binary,       // args[0] name args[1], name one of + - * / // % ** ~
    Compare,      // args[0] ops[0] args[1] ops[1] args[2] ...: ==, !=, <, <=, >, >=, in, not in
    And,
    Or,
    Conditional,  // args[1] if args[0] else args[2] (args[2] null: undefined)
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  std::vector<std::string> ops;
  bool negated = false;
};

struct Node;
using NodePtr = std::unique_ptr<const Node>;
using Body = std::vector<NodePtr>;

// Where an assignment stores: one name, a namespace's attribute (`ns.name`), or names to unpack a sequence into.
struct Target {
  std::vector<std::string> names;  // one, or several for unpacking
  std::string attribute;           // set: names[0] is the namespace
  bool unpack = false;
};

struct Macro {
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // a null default: the parameter is required
  Body body;
};

struct Node {
  enum class Kind {
    Data,        // text
    Output,      // {{ expr }}
    If,          // branches: (condition, body) for if and each elif; else_body
    For,         // for target in expr [if condition]: body; else_body when nothing was iterated
    Set,         // target = expr
    SetBlock,    // {% set target %}body{% endset %}, filters applied to the text: filters
    Macro,       // macro
    Break,
    Continue,
    Generation,  // {% generation %}body{% endgeneration %}: the text the assistant generates
    FilterBlock, // {% filter f %}body{% endfilter %}: filters
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr, condition;
  Target target;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
  std::vector<ExprPtr> filters;  // Filter expressions whose args[0] is null: applied to a block's text
  std::shared_ptr<const Macro> macro;
};

}  // namespace tk::jinja
