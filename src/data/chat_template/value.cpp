// Python's rules for template values (value.h).
#include "data/chat_template/value.h"

#include <charconv>
#include <cmath>

#include <nlohmann/json.hpp>

#include "data/chat_template/py_text.h"

namespace tk::jinja {

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : entries)
    if (equal(k, key)) return &v;
  return nullptr;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : entries)
    if (k.is_string() && k.str() == key) return &v;
  return nullptr;
}

void Dict::set(Value key, Value value) {
  for (auto& [k, v] : entries)
    if (equal(k, key)) {
      v = std::move(value);
      return;
    }
  entries.emplace_back(std::move(key), std::move(value));
}

std::string Value::undefined_name() const {
  const auto* p = std::get_if<std::shared_ptr<const std::string>>(&payload_);
  return p && *p ? **p : std::string();
}

void undefined_fault(const Value& v) {
  const std::string what = v.undefined_name();
  fault("{}", what.empty() ? std::string("a value is undefined") : what);
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return false;
    case Value::Kind::Bool: return v.boolean();
    case Value::Kind::Int: return v.integer() != 0;
    case Value::Kind::Float: return v.number() != 0;
    case Value::Kind::String: return !v.str().empty();
    case Value::Kind::List:
    case Value::Kind::Tuple: return !v.items().empty();
    case Value::Kind::Dict: return !v.dict().entries.empty();
    case Value::Kind::Namespace:
    case Value::Kind::Function: return true;
  }
  return false;
}

bool equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.kind() == K::Float || b.kind() == K::Float) return a.number() == b.number();
    return a.integer() == b.integer();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::Undefined:
    case K::None: return true;
    case K::String: return a.str() == b.str();
    case K::List:
    case K::Tuple: {
      const List &x = a.items(), &y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); i++)
        if (!equal(x[i], y[i])) return false;
      return true;
    }
    case K::Dict: {
      const Dict &x = a.dict(), &y = b.dict();
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [k, v] : x.entries) {
        const Value* other = y.find(k);
        if (!other || !equal(v, *other)) return false;
      }
      return true;
    }
    case K::Namespace: return &a.ns() == &b.ns();
    case K::Function: return &a.function() == &b.function();
    default: return false;
  }
}

int compare(const Value& a, const Value& b) {
  if (a.is_undefined()) undefined_fault(a);
  if (b.is_undefined()) undefined_fault(b);
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::Float || b.kind() == Value::Kind::Float)
      return a.number() < b.number() ? -1 : a.number() > b.number() ? 1 : 0;
    return a.integer() < b.integer() ? -1 : a.integer() > b.integer() ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) return a.str().compare(b.str()) < 0 ? -1 : a.str() == b.str() ? 0 : 1;
  if (a.kind() == b.kind() && a.is_sequence()) {
    const List &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); i++)
      if (!equal(x[i], y[i])) return compare(x[i], y[i]);
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  fault("'<' not supported between instances of '{}' and '{}'", type_name(a), type_name(b));
}

std::string format_float(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  const std::string sci(buf, r.ptr);  // [-]d[.ddd]e(+|-)XX, the shortest digits that read back
  const size_t e = sci.find('e');
  const bool negative = sci[0] == '-';
  std::string digits;
  for (size_t i = negative ? 1 : 0; i < e; i++)
    if (sci[i] != '.') digits += sci[i];
  const int exponent = std::stoi(sci.substr(e + 1));
  const int point = exponent + 1;  // digits before the decimal point
  std::string out = negative ? "-" : "";
  if (point > -4 && point <= 16) {
    if (point <= 0) {
      out += "0." + std::string(size_t(-point), '0') + digits;
    } else if (size_t(point) >= digits.size()) {
      out += digits + std::string(size_t(point) - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, size_t(point)) + "." + digits.substr(size_t(point));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  out += fmt::format("e{}{:02}", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out;
}

std::string str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "";
    case Value::Kind::String: return v.str();
    default: return repr(v);
  }
}

std::string repr(const Value& v) {
  using K = Value::Kind;
  switch (v.kind()) {
    case K::Undefined: return "";
    case K::None: return "None";
    case K::Bool: return v.boolean() ? "True" : "False";
    case K::Int: return std::to_string(v.integer());
    case K::Float: return format_float(v.number());
    case K::String: return py_repr_string(v.str());
    case K::List:
    case K::Tuple: {
      const bool tuple = v.kind() == K::Tuple;
      std::string out = tuple ? "(" : "[";
      const List& items = v.items();
      for (size_t i = 0; i < items.size(); i++) out += (i ? ", " : "") + repr(items[i]);
      if (tuple && items.size() == 1) out += ",";
      return out + (tuple ? ")" : "]");
    }
    case K::Dict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, item] : v.dict().entries) {
        out += (first ? "" : ", ") + repr(k) + ": " + repr(item);
        first = false;
      }
      return out + "}";
    }
    case K::Namespace: fault("a namespace() cannot be printed");
    case K::Function: fault("the function {} cannot be printed (call it with ())", v.function_name());
  }
  return "";
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "Undefined";
    case Value::Kind::None: return "NoneType";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Int: return "int";
    case Value::Kind::Float: return "float";
    case Value::Kind::String: return "str";
    case Value::Kind::List: return "list";
    case Value::Kind::Tuple: return "tuple";
    case Value::Kind::Dict: return "dict";
    case Value::Kind::Namespace: return "Namespace";
    case Value::Kind::Function: return "function";
  }
  return "?";
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > uint64_t(INT64_MAX)) fault("the integer {} is too large for a chat template (at most 2^63 - 1)", u);
      return Value(int64_t(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      d.entries.reserve(j.size());
      for (const auto& [k, e] : j.items()) d.entries.emplace_back(Value(k), from_json(e));
      return Value::dict(std::move(d));
    }
    default: fault("JSON of type {} cannot be given to a chat template", j.type_name());
  }
}

List iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::List:
    case Value::Kind::Tuple: return v.items();
    case Value::Kind::Dict: {
      List keys;
      for (const auto& [k, item] : v.dict().entries) keys.push_back(k);
      return keys;
    }
    case Value::Kind::String: {
      List chars;
      const std::string& s = v.str();
      for (size_t i = 0; i < s.size();) {
        const size_t n = code_point_at(s, i).bytes;
        chars.emplace_back(s.substr(i, n));
        i += n;
      }
      return chars;
    }
    default: fault("'{}' object is not iterable", type_name(v));
  }
}

}  // namespace tk::jinja
