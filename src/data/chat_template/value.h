// The values a chat template computes with, and Python's rules for them as Jinja applies them: truth, equality,
// ordering, str() (what {{ }} prints) and repr() (how a list or dict prints its items). Strings, lists and dicts
// are immutable and shared, as in transformers' immutable sandbox; a namespace() is the one mutable value.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json_fwd.hpp>

namespace tk::jinja {

// An error while rendering, without its place: the renderer adds the template's name and line.
struct Fault : std::runtime_error {
  using std::runtime_error::runtime_error;
};
template <class... Args>
[[noreturn]] void fault(fmt::format_string<Args...> f, Args&&... args) {
  throw Fault(fmt::format(f, std::forward<Args>(args)...));
}

class Value;
using List = std::vector<Value>;
struct Dict {
  std::vector<std::pair<Value, Value>> entries;  // in insertion order, as a Python dict
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);  // replaces an equal key's value in place, else appends
};
struct Namespace {
  Dict attributes;
};
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;
};
using NativeFunction = std::function<Value(CallArgs& args)>;

class Value {
 public:
  enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Tuple, Dict, Namespace, Function };

  Value() = default;  // undefined, with no name
  static Value undefined(std::string name) { return Value(Kind::Undefined, std::make_shared<const std::string>(std::move(name))); }
  static Value none() { return Value(Kind::None, std::monostate()); }
  Value(bool b) : kind_(Kind::Bool), payload_(b) {}
  Value(int64_t i) : kind_(Kind::Int), payload_(i) {}
  Value(int i) : Value(int64_t(i)) {}
  Value(double f) : kind_(Kind::Float), payload_(f) {}
  Value(std::string s) : kind_(Kind::String), payload_(std::make_shared<const std::string>(std::move(s))) {}
  Value(std::string_view s) : Value(std::string(s)) {}
  Value(const char* s) : Value(std::string(s)) {}
  static Value list(List items, bool tuple = false) {
    return Value(tuple ? Kind::Tuple : Kind::List, std::make_shared<const List>(std::move(items)));
  }
  static Value dict(Dict d) { return Value(Kind::Dict, std::make_shared<const Dict>(std::move(d))); }
  static Value make_namespace(Dict attributes) {
    return Value(Kind::Namespace, std::make_shared<Namespace>(Namespace{std::move(attributes)}));
  }
  // `name` is what errors and repr() call it (a filter, a macro, a bound method such as "str.split").
  static Value function(std::string name, NativeFunction f) {
    return Value(Kind::Function, std::make_shared<const Function>(Function{std::move(name), std::move(f)}));
  }

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_number() const { return kind_ == Kind::Bool || kind_ == Kind::Int || kind_ == Kind::Float; }
  bool is_integer() const { return kind_ == Kind::Bool || kind_ == Kind::Int; }  // Python's bool is an int
  bool is_sequence() const { return kind_ == Kind::List || kind_ == Kind::Tuple; }
  bool is_dict() const { return kind_ == Kind::Dict; }

  bool boolean() const { return std::get<bool>(payload_); }
  int64_t integer() const { return kind_ == Kind::Bool ? int64_t(boolean()) : std::get<int64_t>(payload_); }
  double number() const { return kind_ == Kind::Float ? std::get<double>(payload_) : double(integer()); }
  const std::string& str() const { return *std::get<std::shared_ptr<const std::string>>(payload_); }
  const List& items() const { return *std::get<std::shared_ptr<const List>>(payload_); }
  const Dict& dict() const { return *std::get<std::shared_ptr<const Dict>>(payload_); }
  Namespace& ns() const { return *std::get<std::shared_ptr<Namespace>>(payload_); }
  const NativeFunction& function() const { return std::get<std::shared_ptr<const Function>>(payload_)->f; }
  const std::string& function_name() const { return std::get<std::shared_ptr<const Function>>(payload_)->name; }
  // What an undefined value stands for ("'x' is undefined", "'dict object' has no attribute 'y'"): the error that
  // using it raises; "" when unknown.
  std::string undefined_name() const;

 private:
  struct Function {
    std::string name;
    NativeFunction f;
  };
  using Payload = std::variant<std::monostate, bool, int64_t, double, std::shared_ptr<const std::string>,
                               std::shared_ptr<const List>, std::shared_ptr<const Dict>, std::shared_ptr<Namespace>,
                               std::shared_ptr<const Function>>;
  Value(Kind k, Payload p) : kind_(k), payload_(std::move(p)) {}

  Kind kind_ = Kind::Undefined;
  Payload payload_;
};

bool truthy(const Value& v);
bool equal(const Value& a, const Value& b);
// Python's ordering: numbers with numbers, strings with strings, sequences item by item; anything else is a Fault.
int compare(const Value& a, const Value& b);
std::string str(const Value& v);   // str(): what {{ v }} prints; undefined prints nothing
std::string repr(const Value& v);  // repr(): how an item prints inside a list or dict
std::string type_name(const Value& v);  // Python's name of the type, for messages: str, int, list, dict, NoneType, ...
std::string format_float(double f);  // repr() of a float: the shortest digits that read back, Python's layout
// [Jinja's Undefined]: using an undefined value where a defined one is needed.
[[noreturn]] void undefined_fault(const Value& v);

// JSON in (messages, tools): objects keep their key order; numbers that are integers stay integers.
Value from_json(const nlohmann::ordered_json& j);

// The items a for loop or a filter walks: a sequence's items, a dict's keys, a string's characters; undefined
// gives none. Anything else is a Fault naming what was given.
List iterate(const Value& v);

}  // namespace tk::jinja
