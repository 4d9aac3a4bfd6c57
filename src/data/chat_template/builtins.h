// What a chat template can call: Jinja's filters and tests (filters.cpp), attribute and item lookup with the
// methods of str, dict and list (methods.cpp), and transformers' tojson (json_dump.cpp). Each follows the Python
// function jinja2 or transformers runs, and faults where that raises.
#pragma once
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "data/chat_template/value.h"

namespace tk::jinja {

// A call's arguments read by position or keyword, as a Python signature binds them; leftovers are a Fault.
class Arguments {
 public:
  Arguments(CallArgs& args, std::string_view function, std::initializer_list<const char*> names, size_t skip = 0);
  // The argument at position i of the signature (or given by its name); null when not given.
  const Value* get(size_t i) const;
  Value get_or(size_t i, Value otherwise) const;
  const CallArgs& raw() const { return args_; }

 private:
  CallArgs& args_;
  std::string function_;
  std::vector<const char*> names_;
  size_t skip_;
};

bool has_filter(std::string_view name);
bool has_test(std::string_view name);
Value apply_filter(std::string_view name, const Value& input, CallArgs& args);
bool apply_test(std::string_view name, const Value& input, CallArgs& args);

// obj.name as jinja2 resolves it: a method of str, dict or list first, then a dict's item, a namespace's attribute;
// undefined when there is none. Looking into an undefined value is a Fault.
Value attribute_of(const Value& obj, const std::string& name);
// obj[key]: a dict's item, a sequence's or string's index (negative from the end), then an attribute; undefined
// when there is none.
Value item_of(const Value& obj, const Value& key);
// obj[start:stop:step] of a sequence or string, Python's rules; a null bound is left out.
Value slice_of(const Value& obj, const Value* start, const Value* stop, const Value* step);

// transformers' tojson filter: json.dumps(x, ensure_ascii, indent, separators, sort_keys).
struct JsonStyle {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // json.dumps' indent as a string (a number n means n spaces)
  std::string item_separator = ", ", key_separator = ": ";
  bool sort_keys = false;
};
std::string dump_json(const Value& v, const JsonStyle& style);
JsonStyle json_style(const Arguments& args);  // tojson's arguments after the value

}  // namespace tk::jinja
