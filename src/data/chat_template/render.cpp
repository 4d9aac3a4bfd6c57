// Renders a parsed template (render.h): statements run against a chain of scopes, expressions evaluate to values
// with Python's operators, and a Fault from anywhere below becomes a tk::Error naming the statement's line.
#include "data/chat_template/render.h"

#include <cmath>
#include <memory>

#include "core/error.h"
#include "data/chat_template/builtins.h"

namespace tk::jinja {
namespace {

struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent.get())
      for (const auto& [n, v] : s->vars)
        if (n == name) return &v;
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& [n, old] : vars)
      if (n == name) {
        old = std::move(v);
        return;
      }
    vars.emplace_back(name, std::move(v));
  }
};
using ScopePtr = std::shared_ptr<Scope>;

constexpr int kMaxCallDepth = 100;

[[noreturn]] void bad_operands(const char* op, const Value& a, const Value& b) {
  if (a.is_undefined()) undefined_fault(a);
  if (b.is_undefined()) undefined_fault(b);
  if (a.is_string() && std::string_view(op) == "+")
    fault("can only concatenate str (not \"{}\") to str", type_name(b));
  fault("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b));
}

// a op b on int64, or a Fault where Python's unbounded integers would go past int64.
template <class Op>
int64_t checked(Op op, int64_t a, int64_t b) {
  int64_t r = 0;
  if (op(a, b, &r)) fault("an integer result is past 2^63 - 1");
  return r;
}
bool add(int64_t a, int64_t b, int64_t* r) { return __builtin_add_overflow(a, b, r); }
bool sub(int64_t a, int64_t b, int64_t* r) { return __builtin_sub_overflow(a, b, r); }
bool mul(int64_t a, int64_t b, int64_t* r) { return __builtin_mul_overflow(a, b, r); }

Value repeat(const Value& seq, int64_t n) {
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; i++) out += seq.str();
    return Value(std::move(out));
  }
  List out;
  for (int64_t i = 0; i < n; i++) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return Value::list(std::move(out), seq.kind() == Value::Kind::Tuple);
}

// Python's float floor division and modulo (its float_divmod).
std::pair<double, double> float_divmod(double x, double y) {
  double mod = std::fmod(x, y), div = (x - mod) / y;
  if (mod != 0) {
    if ((y < 0) != (mod < 0)) mod += y, div -= 1.0;
  } else {
    mod = std::copysign(0.0, y);
  }
  double floordiv = 0;
  if (div != 0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, x / y);
  }
  return {floordiv, mod};
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value(str(a) + str(b));
  const bool numbers = a.is_number() && b.is_number();
  const bool floats = numbers && (a.kind() == Value::Kind::Float || b.kind() == Value::Kind::Float);
  if (op == "+") {
    if (floats) return Value(a.number() + b.number());
    if (numbers) return Value(checked(add, a.integer(), b.integer()));
    if (a.is_string() && b.is_string()) return Value(a.str() + b.str());
    if (a.is_sequence() && a.kind() == b.kind()) {
      List out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      return Value::list(std::move(out), a.kind() == Value::Kind::Tuple);
    }
  } else if (op == "-") {
    if (floats) return Value(a.number() - b.number());
    if (numbers) return Value(checked(sub, a.integer(), b.integer()));
  } else if (op == "*") {
    if (floats) return Value(a.number() * b.number());
    if (numbers) return Value(checked(mul, a.integer(), b.integer()));
    if ((a.is_string() || a.is_sequence()) && b.is_integer()) return repeat(a, b.integer());
    if (a.is_integer() && (b.is_string() || b.is_sequence())) return repeat(b, a.integer());
  } else if (op == "/") {
    if (numbers) {
      if (b.number() == 0) fault("division by zero");
      return Value(a.number() / b.number());
    }
  } else if (op == "//" || op == "%") {
    if (numbers) {
      if (b.number() == 0) fault("integer division or modulo by zero");
      if (floats) return op == "%" ? Value(float_divmod(a.number(), b.number()).second)
                                   : Value(float_divmod(a.number(), b.number()).first);
      const int64_t x = a.integer(), y = b.integer();
      if (x == INT64_MIN && y == -1) fault("an integer result is past 2^63 - 1");
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) q--, m += y;
      return op == "%" ? Value(m) : Value(q);
    }
    if (op == "%" && a.is_string()) fault("printf-style string formatting (%) is not supported in chat templates");
  } else if (op == "**") {
    if (numbers) {
      if (!floats && b.integer() >= 0) {
        const int64_t base = a.integer(), e = b.integer();
        if (base == 0 || base == 1) return Value(e == 0 ? int64_t(1) : base);
        if (base == -1) return Value(e % 2 ? int64_t(-1) : int64_t(1));
        int64_t result = 1;  // |base| >= 2: at most 63 steps before an overflow
        for (int64_t i = 0; i < e; i++) result = checked(mul, result, base);
        return Value(result);
      }
      return Value(std::pow(a.number(), b.number()));
    }
  }
  bad_operands(op == "**" ? "** or pow()" : op.c_str(), a, b);
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (item.is_undefined()) undefined_fault(item);
    if (!item.is_string()) fault("'in <string>' requires string as left operand, not {}", type_name(item));
    return container.str().find(item.str()) != std::string::npos;
  }
  if (container.is_dict()) return container.dict().find(item) != nullptr;
  if (container.is_undefined() || container.is_sequence()) {
    for (const Value& v : iterate(container))
      if (equal(v, item)) return true;
    return false;
  }
  fault("argument of type '{}' is not iterable", type_name(container));
}

bool compare_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equal(a, b);
  if (op == "!=") return !equal(a, b);
  if (op == "in") return contains(b, a);
  if (op == "not in") return !contains(b, a);
  const int c = compare(a, b);
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  return c >= 0;
}

class Renderer {
 public:
  Renderer(const std::string& name) : name_(name) {}

  RenderOutput run(const ParsedTemplate& parsed, const Dict& variables) {
    auto root = std::make_shared<Scope>();
    add_globals(*root);
    for (const auto& [k, v] : variables.entries) root->set(k.str(), v);
    out_ = &main_;
    exec(parsed.body, root);
    return {std::move(main_), std::move(generation_)};
  }

 private:
  enum class Flow { Normal, Break, Continue };

  void add_globals(Scope& s) {
    s.set("range", Value::function("range", [](CallArgs& a) {
            Arguments args(a, "range", {"start", "stop", "step"});
            const Value* v[3] = {args.get(0), args.get(1), args.get(2)};
            for (const Value* x : v)
              if (x && !x->is_integer()) fault("range() takes integers, not {}", type_name(*x));
            if (!v[0]) fault("range expected at least 1 argument, got 0");
            const int64_t start = v[1] ? v[0]->integer() : 0, stop = v[1] ? v[1]->integer() : v[0]->integer();
            const int64_t step = v[2] ? v[2]->integer() : 1;
            if (step == 0) fault("range() arg 3 must not be zero");
            List out;
            for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
              if (out.size() >= 100000) fault("range() is limited to 100000 items, as in jinja2's sandbox");
              out.emplace_back(i);
            }
            return Value::list(std::move(out));
          }));
    s.set("dict", Value::function("dict", [](CallArgs& a) {
            if (!a.positional.empty()) fault("dict() takes keyword arguments only in chat templates");
            Dict d;
            for (auto& [k, v] : a.named) d.set(Value(k), v);
            return Value::dict(std::move(d));
          }));
    s.set("namespace", Value::function("namespace", [](CallArgs& a) {
            Dict d;
            if (a.positional.size() > 1) fault("namespace() takes at most one positional argument");
            if (!a.positional.empty()) {
              if (!a.positional[0].is_dict()) fault("namespace()'s positional argument must be a dict");
              d = a.positional[0].dict();
            }
            for (auto& [k, v] : a.named) d.set(Value(k), v);
            return Value::make_namespace(std::move(d));
          }));
  }

  Flow exec(const Body& body, const ScopePtr& scope) {
    for (const NodePtr& n : body) {
      const Flow f = exec(*n, scope);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Flow exec(const Node& n, const ScopePtr& scope) {
    try {
      return exec_node(n, scope);
    } catch (const Fault& f) {
      fail("chat template {}, line {}: {}", name_, n.line, f.what());
    }
  }

  std::string capture(const Body& body, const ScopePtr& scope) {
    std::string text;
    std::string* saved = out_;
    out_ = &text;
    captures_++;
    try {
      exec(body, scope);
    } catch (...) {
      out_ = saved;
      captures_--;
      throw;
    }
    out_ = saved;
    captures_--;
    return text;
  }

  Value apply_filters(const std::vector<ExprPtr>& filters, Value v, Scope& scope) {
    for (const ExprPtr& f : filters) {
      CallArgs args = call_args(*f, 1, scope);
      v = apply_filter(f->name, v, args);
    }
    return v;
  }

  Flow exec_node(const Node& n, const ScopePtr& scope) {
    switch (n.kind) {
      case Node::Kind::Data: *out_ += n.text; return Flow::Normal;
      case Node::Kind::Output: *out_ += str(eval(*n.expr, *scope)); return Flow::Normal;
      case Node::Kind::If:
        for (const auto& [cond, body] : n.branches)
          if (truthy(eval(*cond, *scope))) return exec(body, scope);
        return exec(n.else_body, scope);
      case Node::Kind::For: return exec_for(n, scope);
      case Node::Kind::Set: assign(n.target, eval(*n.expr, *scope), *scope); return Flow::Normal;
      case Node::Kind::SetBlock:
        assign(n.target, apply_filters(n.filters, Value(capture(n.body, scope)), *scope), *scope);
        return Flow::Normal;
      case Node::Kind::FilterBlock:
        *out_ += str(apply_filters(n.filters, Value(capture(n.body, scope)), *scope));
        return Flow::Normal;
      case Node::Kind::Macro: scope->set(n.macro->name, macro_value(n.macro, scope)); return Flow::Normal;
      case Node::Kind::Break:
      case Node::Kind::Continue:
        if (loops_ == 0) fault("{{% {} %}} outside a for loop", n.kind == Node::Kind::Break ? "break" : "continue");
        return n.kind == Node::Kind::Break ? Flow::Break : Flow::Continue;
      case Node::Kind::Generation: {
        if (captures_ > 0) fault("{{% generation %}} inside a macro, a set block or a filter block is not supported");
        if (in_generation_) fault("{{% generation %}} blocks cannot be nested");
        in_generation_ = true;
        const size_t begin = main_.size();
        const Flow f = exec(n.body, scope);
        in_generation_ = false;
        generation_.emplace_back(begin, main_.size());
        return f;
      }
    }
    return Flow::Normal;
  }

  void bind(const Target& t, const Value& v, Scope& scope) {
    if (!t.unpack) {
      scope.set(t.names[0], v);
      return;
    }
    const List items = iterate(v);
    if (items.size() != t.names.size())
      fault("{} values to unpack (expected {}, got {})", items.size() > t.names.size() ? "too many" : "not enough",
            t.names.size(), items.size());
    for (size_t i = 0; i < items.size(); i++) scope.set(t.names[i], items[i]);
  }

  void assign(const Target& t, const Value& v, Scope& scope) {
    if (t.attribute.empty()) return bind(t, v, scope);
    const Value* ns = scope.find(t.names[0]);
    if (!ns || ns->kind() != Value::Kind::Namespace) fault("cannot assign attribute on non-namespace object");
    ns->ns().attributes.set(Value(t.attribute), v);
  }

  Flow exec_for(const Node& n, const ScopePtr& scope) {
    List items = iterate(eval(*n.expr, *scope));
    if (n.condition) {
      List kept;
      for (const Value& item : items) {
        auto s = std::make_shared<Scope>(Scope{scope, {}});
        bind(n.target, item, *s);
        if (truthy(eval(*n.condition, *s))) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec(n.else_body, scope);
    const int64_t length = int64_t(items.size());
    loops_++;
    for (int64_t i = 0; i < length; i++) {
      auto s = std::make_shared<Scope>(Scope{scope, {}});
      bind(n.target, items[size_t(i)], *s);
      s->set("loop", loop_value(items, i));
      const Flow f = exec(n.body, s);
      if (f == Flow::Break) break;
    }
    loops_--;
    return Flow::Normal;
  }

  static Value loop_value(const List& items, int64_t i) {
    const int64_t length = int64_t(items.size());
    Dict d;
    d.entries.reserve(12);
    d.entries.emplace_back(Value("index"), Value(i + 1));
    d.entries.emplace_back(Value("index0"), Value(i));
    d.entries.emplace_back(Value("revindex"), Value(length - i));
    d.entries.emplace_back(Value("revindex0"), Value(length - i - 1));
    d.entries.emplace_back(Value("first"), Value(i == 0));
    d.entries.emplace_back(Value("last"), Value(i == length - 1));
    d.entries.emplace_back(Value("length"), Value(length));
    d.entries.emplace_back(Value("depth"), Value(int64_t(1)));
    d.entries.emplace_back(Value("depth0"), Value(int64_t(0)));
    d.entries.emplace_back(Value("previtem"), i > 0 ? items[size_t(i - 1)] : Value::undefined("there is no previous item"));
    d.entries.emplace_back(Value("nextitem"), i + 1 < length ? items[size_t(i + 1)] : Value::undefined("there is no next item"));
    d.entries.emplace_back(Value("cycle"), Value::function("loop.cycle", [i](CallArgs& a) {
                             if (a.positional.empty()) fault("no items for cycling given");
                             return a.positional[size_t(i) % a.positional.size()];
                           }));
    return Value::dict(std::move(d));
  }

  // The macro sees the scope it was defined in, held weakly: the scope holds the macro, and a strong hold would make
  // a cycle that outlives the render.
  Value macro_value(const std::shared_ptr<const Macro>& m, const ScopePtr& scope) {
    return Value::function(m->name, [this, m, weak = std::weak_ptr<Scope>(scope)](CallArgs& a) {
      const ScopePtr defined_in = weak.lock();
      if (!defined_in) fault("macro '{}' is called after the block it was defined in has ended", m->name);
      if (a.positional.size() > m->params.size())
        fault("macro '{}' takes not more than {} argument(s)", m->name, m->params.size());
      if (depth_ >= kMaxCallDepth) fault("macros call each other more than {} deep", kMaxCallDepth);
      auto s = std::make_shared<Scope>(Scope{defined_in, {}});
      for (const auto& entry : a.named) {
        const auto& key = entry.first;  // not a structured binding: the lambda captures it
        const bool known = std::any_of(m->params.begin(), m->params.end(), [&](const auto& p) { return p.first == key; });
        if (!known) fault("macro '{}' takes no keyword argument '{}'", m->name, key);
      }
      for (size_t i = 0; i < m->params.size(); i++) {
        const auto& [param, def] = m->params[i];
        const Value* given = i < a.positional.size() ? &a.positional[i] : nullptr;
        for (const auto& [key, value] : a.named)
          if (key == param) given = &value;
        s->set(param, given ? *given : def ? eval(*def, *s) : Value::undefined(fmt::format("'{}' is undefined", param)));
      }
      depth_++;
      const int saved_loops = loops_;
      loops_ = 0;
      std::string text;
      try {
        text = capture(m->body, s);
      } catch (...) {
        depth_--;
        loops_ = saved_loops;
        throw;
      }
      depth_--;
      loops_ = saved_loops;
      return Value(std::move(text));
    });
  }

  CallArgs call_args(const Expr& e, size_t first, Scope& scope) {
    CallArgs a;
    for (size_t i = first; i < e.args.size(); i++) a.positional.push_back(eval(*e.args[i], scope));
    for (const auto& [k, v] : e.keywords) a.named.emplace_back(k, eval(*v, scope));
    return a;
  }

  Value eval(const Expr& e, Scope& scope) {
    using K = Expr::Kind;
    switch (e.kind) {
      case K::Literal: return e.value;
      case K::Name: {
        const Value* v = scope.find(e.name);
        return v ? *v : Value::undefined(fmt::format("'{}' is undefined", e.name));
      }
      case K::List:
      case K::Tuple: {
        List items;
        for (const ExprPtr& a : e.args) items.push_back(eval(*a, scope));
        return Value::list(std::move(items), e.kind == K::Tuple);
      }
      case K::Dict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) d.set(eval(*e.args[i], scope), eval(*e.args[i + 1], scope));
        return Value::dict(std::move(d));
      }
      case K::Attribute: return attribute_of(eval(*e.args[0], scope), e.name);
      case K::Item: return item_of(eval(*e.args[0], scope), eval(*e.args[1], scope));
      case K::Slice: {
        const Value obj = eval(*e.args[0], scope);
        Value bounds[3];
        const Value* b[3] = {nullptr, nullptr, nullptr};
        for (int i = 0; i < 3; i++)
          if (e.args[size_t(i) + 1]) bounds[i] = eval(*e.args[size_t(i) + 1], scope), b[i] = &bounds[i];
        return slice_of(obj, b[0], b[1], b[2]);
      }
      case K::Call: {
        const Value callee = eval(*e.args[0], scope);
        if (callee.is_undefined()) undefined_fault(callee);
        if (callee.kind() != Value::Kind::Function) fault("'{}' object is not callable", type_name(callee));
        CallArgs a = call_args(e, 1, scope);
        return callee.function()(a);
      }
      case K::Filter: {
        const Value input = eval(*e.args[0], scope);
        CallArgs a = call_args(e, 1, scope);
        return apply_filter(e.name, input, a);
      }
      case K::Test: {
        const Value input = eval(*e.args[0], scope);
        CallArgs a = call_args(e, 1, scope);
        return Value(apply_test(e.name, input, a) != e.negated);
      }
      case K::Not: return Value(!truthy(eval(*e.args[0], scope)));
      case K::Negate:
      case K::Plus: {
        const Value v = eval(*e.args[0], scope);
        if (v.is_undefined()) undefined_fault(v);
        if (!v.is_number()) fault("bad operand type for unary {}: '{}'", e.kind == K::Negate ? "-" : "+", type_name(v));
        if (e.kind == K::Plus) return v.kind() == Value::Kind::Bool ? Value(v.integer()) : v;
        if (v.kind() == Value::Kind::Float) return Value(-v.number());
        if (v.integer() == INT64_MIN) fault("an integer result is past 2^63 - 1");
        return Value(-v.integer());
      }
      case K::Binary: return arithmetic(e.name, eval(*e.args[0], scope), eval(*e.args[1], scope));
      case K::Compare: {
        Value left = eval(*e.args[0], scope);
        for (size_t i = 0; i < e.ops.size(); i++) {
          Value right = eval(*e.args[i + 1], scope);
          if (!compare_op(e.ops[i], left, right)) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case K::And: {
        Value a = eval(*e.args[0], scope);
        return truthy(a) ? eval(*e.args[1], scope) : a;
      }
      case K::Or: {
        Value a = eval(*e.args[0], scope);
        return truthy(a) ? a : eval(*e.args[1], scope);
      }
      case K::Conditional:
        if (truthy(eval(*e.args[0], scope))) return eval(*e.args[1], scope);
        return e.args[2] ? eval(*e.args[2], scope) : Value::undefined("the conditional expression had no else");
    }
    return Value();
  }

  const std::string& name_;
  std::string main_;
  std::string* out_ = nullptr;
  std::vector<std::pair<size_t, size_t>> generation_;
  int captures_ = 0, loops_ = 0, depth_ = 0;
  bool in_generation_ = false;
};

}  // namespace

RenderOutput render_template(const ParsedTemplate& parsed, const std::string& name, const Dict& variables) {
  return Renderer(name).run(parsed, variables);
}

}  // namespace tk::jinja
