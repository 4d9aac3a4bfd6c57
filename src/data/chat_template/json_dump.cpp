// transformers' tojson: Python's json.dumps with its escaping, separators, indentation and key conversion, so that
// tools and tool-call arguments print byte for byte as apply_chat_template prints them.
#include <algorithm>
#include <cmath>

#include "data/chat_template/builtins.h"
#include "data/chat_template/py_text.h"

namespace tk::jinja {
namespace {

void append_escaped(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const CodePoint c = code_point_at(s, i);
    const uint32_t v = c.value;
    switch (v) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (v < 0x20 || (ensure_ascii && v >= 0x7F)) {
          if (v > 0xFFFF) {
            const uint32_t u = v - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (u >> 10), 0xDC00 + (u & 0x3FF));
          } else {
            out += fmt::format("\\u{:04x}", v);
          }
        } else {
          out += s.substr(i, c.bytes);
        }
    }
    i += c.bytes;
  }
  out += '"';
}

std::string json_float(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f < 0 ? "-Infinity" : "Infinity";
  return format_float(f);
}

// A dict key as json.dumps converts it: str as it is; bool, None, int and float to their JSON text.
std::string key_text(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::String: return k.str();
    case Value::Kind::Bool: return k.boolean() ? "true" : "false";
    case Value::Kind::None: return "null";
    case Value::Kind::Int: return std::to_string(k.integer());
    case Value::Kind::Float: return json_float(k.number());
    default: fault("keys must be str, int, float, bool or None, not {}", type_name(k));
  }
}

class Dumper {
 public:
  explicit Dumper(const JsonStyle& s) : s_(s) {}

  void dump(const Value& v, int depth) {
    switch (v.kind()) {
      case Value::Kind::None: out += "null"; return;
      case Value::Kind::Bool: out += v.boolean() ? "true" : "false"; return;
      case Value::Kind::Int: out += std::to_string(v.integer()); return;
      case Value::Kind::Float: out += json_float(v.number()); return;
      case Value::Kind::String: append_escaped(out, v.str(), s_.ensure_ascii); return;
      case Value::Kind::List:
      case Value::Kind::Tuple: {
        const List& items = v.items();
        if (items.empty()) {
          out += "[]";
          return;
        }
        out += '[';
        for (size_t i = 0; i < items.size(); i++) {
          out += i ? s_.item_separator : "";
          newline(depth + 1);
          dump(items[i], depth + 1);
        }
        newline(depth);
        out += ']';
        return;
      }
      case Value::Kind::Dict: {
        std::vector<std::pair<std::string, const Value*>> entries;
        for (const auto& [k, item] : v.dict().entries) entries.emplace_back(key_text(k), &item);
        if (s_.sort_keys)
          std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        if (entries.empty()) {
          out += "{}";
          return;
        }
        out += '{';
        for (size_t i = 0; i < entries.size(); i++) {
          out += i ? s_.item_separator : "";
          newline(depth + 1);
          append_escaped(out, entries[i].first, s_.ensure_ascii);
          out += s_.key_separator;
          dump(*entries[i].second, depth + 1);
        }
        newline(depth);
        out += '}';
        return;
      }
      default: fault("Object of type {} is not JSON serializable", type_name(v));
    }
  }

  std::string out;

 private:
  void newline(int depth) {
    if (!s_.indent) return;
    out += '\n';
    for (int i = 0; i < depth; i++) out += *s_.indent;
  }

  const JsonStyle& s_;
};

}  // namespace

std::string dump_json(const Value& v, const JsonStyle& style) {
  Dumper d(style);
  d.dump(v, 0);
  return std::move(d.out);
}

JsonStyle json_style(const Arguments& args) {
  JsonStyle s;
  s.ensure_ascii = truthy(args.get_or(0, Value(false)));
  const Value indent = args.get_or(1, Value::none());
  if (indent.is_integer()) {
    s.indent = std::string(size_t(std::max<int64_t>(0, indent.integer())), ' ');
  } else if (indent.is_string()) {
    s.indent = indent.str();
  } else if (!indent.is_none()) {
    fault("tojson's indent must be a number or a string, not {}", type_name(indent));
  }
  if (s.indent) s.item_separator = ",";
  const Value separators = args.get_or(2, Value::none());
  if (!separators.is_none()) {
    if (!separators.is_sequence() || separators.items().size() != 2 || !separators.items()[0].is_string() ||
        !separators.items()[1].is_string())
      fault("tojson's separators must be two strings (item separator, key separator)");
    s.item_separator = separators.items()[0].str();
    s.key_separator = separators.items()[1].str();
  }
  s.sort_keys = truthy(args.get_or(3, Value(false)));
  return s;
}

}  // namespace tk::jinja
