// Jinja's filters and tests as jinja2 3.1 defines them (builtins.h), with transformers' tojson. Each filter reads its
// arguments with Python's binding rules; one that jinja2 has but chat templates do not use is unknown, and a
// template naming it is refused when it is loaded, as jinja2 refuses an unknown filter.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>

#include "data/chat_template/builtins.h"
#include "data/chat_template/py_text.h"

namespace tk::jinja {
namespace {

using FilterFn = Value (*)(const Value& v, CallArgs& a);
using TestFn = bool (*)(const Value& v, CallArgs& a);

bool no_args(CallArgs& a, const char* name) {
  Arguments args(a, name, {});
  return true;
}

// A string as Python's int() reads it: optional whitespace and sign, digits with single underscores.
bool parse_int(std::string s, int64_t base, int64_t& out) {
  s = std::string(py_strip(s, "", true, true, true));
  std::string digits;
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() && s[i - 1] != '_' && s[i + 1] != '_' && s[i - 1] != '-' &&
        s[i - 1] != '+')
      continue;
    digits += s[i];
  }
  if (digits.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(digits.c_str(), &end, int(base));
  if (*end != '\0' || errno == ERANGE || digits.find_first_of(" \t") != std::string::npos) return false;
  if ((digits[0] == '+' || digits[0] == '-') && digits.size() == 1) return false;
  out = v;
  return true;
}

bool parse_float(const std::string& text, double& out) {
  const std::string s(py_strip(text, "", true, true, true));
  if (s.empty()) return false;
  std::string lower = py_lower(s);
  const bool neg = !lower.empty() && lower[0] == '-';
  const std::string body = lower[0] == '-' || lower[0] == '+' ? lower.substr(1) : lower;
  if (body == "inf" || body == "infinity" || body == "nan") {
    out = body == "nan" ? std::nan("") : neg ? -INFINITY : INFINITY;
    return true;
  }
  if (s.find_first_not_of("0123456789+-.eE_") != std::string::npos) return false;
  std::string digits;
  for (char c : s)
    if (c != '_') digits += c;
  char* end = nullptr;
  out = std::strtod(digits.c_str(), &end);
  return *end == '\0';
}

Value length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return Value(int64_t(0));
    case Value::Kind::String: return Value(int64_t(code_points(v.str())));
    case Value::Kind::List:
    case Value::Kind::Tuple: return Value(int64_t(v.items().size()));
    case Value::Kind::Dict: return Value(int64_t(v.dict().entries.size()));
    default: fault("object of type '{}' has no len()", type_name(v));
  }
}

// The key sort, unique, min and max compare by: an attribute of each item, strings lower-cased unless case_sensitive.
Value sort_key(const Value& item, const Value& attribute, bool case_sensitive) {
  Value k = item;
  if (!attribute.is_none()) {
    if (!attribute.is_string()) fault("the attribute to sort by must be a string");
    for (const std::string& part : py_split(attribute.str(), ".", false, -1, false)) {
      int64_t index;
      k = parse_int(part, 10, index) ? item_of(k, Value(index)) : item_of(k, Value(part));
    }
  }
  if (!case_sensitive && k.is_string()) return Value(py_lower(k.str()));
  return k;
}

// map(attribute=...) and selectattr's lookup: jinja2's dotted getitem.
Value lookup_path(const Value& item, const std::string& path) {
  Value k = item;
  for (const std::string& part : py_split(path, ".", false, -1, false)) {
    int64_t index;
    k = parse_int(part, 10, index) ? item_of(k, Value(index)) : item_of(k, Value(part));
  }
  return k;
}

CallArgs rest_of(const CallArgs& a, size_t from) {
  CallArgs r;
  for (size_t i = from; i < a.positional.size(); i++) r.positional.push_back(a.positional[i]);
  r.named = a.named;
  return r;
}

Value select_items(const Value& v, CallArgs& a, bool keep, bool by_attribute) {
  const size_t skip = by_attribute ? 1 : 0;
  if (by_attribute && a.positional.empty()) fault("selectattr/rejectattr need the attribute to test");
  const std::string attr = by_attribute ? (a.positional[0].is_string() ? a.positional[0].str() : str(a.positional[0])) : "";
  const bool with_test = a.positional.size() > skip;
  const std::string test = with_test ? str(a.positional[skip]) : "";
  if (with_test && !has_test(test)) fault("no test named '{}'", test);
  List out;
  for (const Value& item : iterate(v)) {
    const Value subject = by_attribute ? lookup_path(item, attr) : item;
    CallArgs rest = rest_of(a, skip + 1);
    const bool pass = with_test ? apply_test(test, subject, rest) : truthy(subject);
    if (pass == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

std::string jinja_title(const std::string& s) {
  // jinja2's title: words begin after -, whitespace, (, {, [ or <; each word's first character upper, the rest lower.
  std::string out;
  bool word_start = true;
  for (size_t i = 0; i < s.size();) {
    const CodePoint c = code_point_at(s, i);
    const std::string_view one = std::string_view(s).substr(i, c.bytes);
    const bool sep = c.value == '-' || c.value == '(' || c.value == '{' || c.value == '[' || c.value == '<' ||
                     py_isspace(c.value);
    out += sep ? std::string(one) : word_start ? py_upper(one) : py_lower(one);
    word_start = sep;
    i += c.bytes;
  }
  return out;
}

const std::map<std::string_view, FilterFn>& filters() {
  static const std::map<std::string_view, FilterFn> table = {
      {"abs", [](const Value& v, CallArgs& a) {
         no_args(a, "abs");
         if (v.kind() == Value::Kind::Float) return Value(std::fabs(v.number()));
         if (v.is_integer()) return Value(v.integer() < 0 ? -v.integer() : v.integer());
         if (v.is_undefined()) undefined_fault(v);
         fault("bad operand type for abs(): '{}'", type_name(v));
       }},
      {"attr", [](const Value& v, CallArgs& a) {
         Arguments args(a, "attr", {"name"});
         const Value* n = args.get(0);
         if (!n || !n->is_string()) fault("attr() needs the attribute's name");
         return attribute_of(v, n->str());
       }},
      {"capitalize", [](const Value& v, CallArgs& a) { no_args(a, "capitalize"); return Value(py_capitalize(str(v))); }},
      {"count", [](const Value& v, CallArgs& a) { no_args(a, "count"); return length(v); }},
      {"default", [](const Value& v, CallArgs& a) {
         Arguments args(a, "default", {"default_value", "boolean"});
         const bool boolean = truthy(args.get_or(1, Value(false)));
         if (v.is_undefined() || (boolean && !truthy(v))) return args.get_or(0, Value(""));
         return v;
       }},
      {"dictsort", [](const Value& v, CallArgs& a) {
         Arguments args(a, "dictsort", {"case_sensitive", "by", "reverse"});
         if (!v.is_dict()) fault("dictsort needs a mapping, not {}", type_name(v));
         const bool cs = truthy(args.get_or(0, Value(false))), rev = truthy(args.get_or(2, Value(false)));
         const Value by = args.get_or(1, Value("key"));
         if (!by.is_string() || (by.str() != "key" && by.str() != "value"))
           fault("You can only sort by either \"key\" or \"value\"");
         const size_t pos = by.str() == "key" ? 0 : 1;
         List pairs;
         for (const auto& [k, item] : v.dict().entries) pairs.push_back(Value::list({k, item}, true));
         std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
           const int c = compare(sort_key(x.items()[pos], Value::none(), cs), sort_key(y.items()[pos], Value::none(), cs));
           return rev ? c > 0 : c < 0;
         });
         return Value::list(std::move(pairs));
       }},
      {"first", [](const Value& v, CallArgs& a) {
         no_args(a, "first");
         const List items = iterate(v);
         return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
       }},
      {"float", [](const Value& v, CallArgs& a) {
         Arguments args(a, "float", {"default"});
         if (v.is_undefined()) undefined_fault(v);
         double f;
         if (v.is_number()) return Value(v.number());
         if (v.is_string() && parse_float(v.str(), f)) return Value(f);
         return args.get_or(0, Value(0.0));
       }},
      {"indent", [](const Value& v, CallArgs& a) {
         Arguments args(a, "indent", {"width", "first", "blank"});
         const Value width = args.get_or(0, Value(int64_t(4)));
         const std::string ind = width.is_string() ? width.str() : std::string(size_t(std::max<int64_t>(0, width.integer())), ' ');
         const std::vector<std::string> lines = py_splitlines(str(v) + "\n", false);
         std::string rv;
         if (truthy(args.get_or(2, Value(false)))) {
           for (size_t i = 0; i < lines.size(); i++) rv += (i ? "\n" + ind : "") + lines[i];
         } else {
           rv = lines.empty() ? "" : lines[0];
           for (size_t i = 1; i < lines.size(); i++) rv += "\n" + (lines[i].empty() ? lines[i] : ind + lines[i]);
         }
         if (truthy(args.get_or(1, Value(false)))) rv = ind + rv;
         return Value(std::move(rv));
       }},
      {"int", [](const Value& v, CallArgs& a) {
         Arguments args(a, "int", {"default", "base"});
         if (v.is_undefined()) undefined_fault(v);
         const int64_t base = args.get_or(1, Value(int64_t(10))).integer();
         int64_t i;
         double f;
         if (v.is_integer()) return Value(v.integer());
         if (v.kind() == Value::Kind::Float && std::isfinite(v.number())) return Value(int64_t(std::trunc(v.number())));
         if (v.is_string() && parse_int(v.str(), base, i)) return Value(i);
         if (v.is_string() && parse_float(v.str(), f) && std::isfinite(f)) return Value(int64_t(std::trunc(f)));
         return args.get_or(0, Value(int64_t(0)));
       }},
      {"items", [](const Value& v, CallArgs& a) {
         no_args(a, "items");
         if (v.is_undefined()) return Value::list({});
         if (!v.is_dict()) fault("Can only get item pairs from a mapping.");
         List pairs;
         for (const auto& [k, item] : v.dict().entries) pairs.push_back(Value::list({k, item}, true));
         return Value::list(std::move(pairs));
       }},
      {"join", [](const Value& v, CallArgs& a) {
         Arguments args(a, "join", {"d", "attribute"});
         const std::string sep = str(args.get_or(0, Value("")));
         const Value attribute = args.get_or(1, Value::none());
         std::string out;
         bool first = true;
         for (const Value& item : iterate(v)) {
           out += (first ? "" : sep) + str(attribute.is_none() ? item : lookup_path(item, str(attribute)));
           first = false;
         }
         return Value(std::move(out));
       }},
      {"last", [](const Value& v, CallArgs& a) {
         no_args(a, "last");
         if (v.is_undefined()) undefined_fault(v);
         const List items = iterate(v);
         return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
       }},
      {"length", [](const Value& v, CallArgs& a) { no_args(a, "length"); return length(v); }},
      {"list", [](const Value& v, CallArgs& a) { no_args(a, "list"); return Value::list(iterate(v)); }},
      {"lower", [](const Value& v, CallArgs& a) { no_args(a, "lower"); return Value(py_lower(str(v))); }},
      {"map", [](const Value& v, CallArgs& a) {
         List out;
         if (a.positional.empty()) {
           Arguments args(a, "map", {"attribute", "default"});
           const Value* attr = args.get(0);
           if (!attr) fault("map() needs a filter name or attribute=");
           const Value def = args.get_or(1, Value());
           for (const Value& item : iterate(v)) {
             Value r = lookup_path(item, str(*attr));
             out.push_back(r.is_undefined() && args.get(1) ? def : r);
           }
           return Value::list(std::move(out));
         }
         const std::string name = str(a.positional[0]);
         if (!has_filter(name)) fault("no filter named '{}'", name);
         for (const Value& item : iterate(v)) {
           CallArgs rest = rest_of(a, 1);
           out.push_back(apply_filter(name, item, rest));
         }
         return Value::list(std::move(out));
       }},
      {"max", [](const Value& v, CallArgs& a) {
         Arguments args(a, "max", {"case_sensitive", "attribute"});
         const List items = iterate(v);
         if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
         const bool cs = truthy(args.get_or(0, Value(false)));
         const Value attr = args.get_or(1, Value::none());
         size_t best = 0;
         for (size_t i = 1; i < items.size(); i++)
           if (compare(sort_key(items[i], attr, cs), sort_key(items[best], attr, cs)) > 0) best = i;
         return items[best];
       }},
      {"min", [](const Value& v, CallArgs& a) {
         Arguments args(a, "min", {"case_sensitive", "attribute"});
         const List items = iterate(v);
         if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
         const bool cs = truthy(args.get_or(0, Value(false)));
         const Value attr = args.get_or(1, Value::none());
         size_t best = 0;
         for (size_t i = 1; i < items.size(); i++)
           if (compare(sort_key(items[i], attr, cs), sort_key(items[best], attr, cs)) < 0) best = i;
         return items[best];
       }},
      {"reject", [](const Value& v, CallArgs& a) { return select_items(v, a, false, false); }},
      {"rejectattr", [](const Value& v, CallArgs& a) { return select_items(v, a, false, true); }},
      {"replace", [](const Value& v, CallArgs& a) {
         Arguments args(a, "replace", {"old", "new", "count"});
         const Value *old = args.get(0), *with = args.get(1);
         if (!old || !with) fault("replace() needs the old and the new text");
         const Value count = args.get_or(2, Value::none());
         return Value(py_replace(str(v), str(*old), str(*with), count.is_none() ? -1 : count.integer()));
       }},
      {"reverse", [](const Value& v, CallArgs& a) {
         no_args(a, "reverse");
         if (v.is_string()) return slice_of(v, nullptr, nullptr, std::make_unique<Value>(int64_t(-1)).get());
         List items = iterate(v);
         std::reverse(items.begin(), items.end());
         return Value::list(std::move(items));
       }},
      {"safe", [](const Value& v, CallArgs& a) { no_args(a, "safe"); return Value(str(v)); }},
      {"select", [](const Value& v, CallArgs& a) { return select_items(v, a, true, false); }},
      {"selectattr", [](const Value& v, CallArgs& a) { return select_items(v, a, true, true); }},
      {"sort", [](const Value& v, CallArgs& a) {
         Arguments args(a, "sort", {"reverse", "case_sensitive", "attribute"});
         const bool rev = truthy(args.get_or(0, Value(false))), cs = truthy(args.get_or(1, Value(false)));
         const Value attr = args.get_or(2, Value::none());
         List items = iterate(v);
         std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
           const int c = compare(sort_key(x, attr, cs), sort_key(y, attr, cs));
           return rev ? c > 0 : c < 0;
         });
         return Value::list(std::move(items));
       }},
      {"string", [](const Value& v, CallArgs& a) { no_args(a, "string"); return Value(str(v)); }},
      {"sum", [](const Value& v, CallArgs& a) {
         Arguments args(a, "sum", {"attribute", "start"});
         const Value attr = args.get_or(0, Value::none());
         Value total = args.get_or(1, Value(int64_t(0)));
         for (const Value& item : iterate(v)) {
           const Value x = attr.is_none() ? item : lookup_path(item, str(attr));
           if (!x.is_number() || !total.is_number()) fault("sum() can add numbers only, not {}", type_name(x));
           if (x.kind() == Value::Kind::Float || total.kind() == Value::Kind::Float)
             total = Value(total.number() + x.number());
           else
             total = Value(total.integer() + x.integer());
         }
         return total;
       }},
      {"title", [](const Value& v, CallArgs& a) { no_args(a, "title"); return Value(jinja_title(str(v))); }},
      {"tojson", [](const Value& v, CallArgs& a) {
         Arguments args(a, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
         return Value(dump_json(v, json_style(args)));
       }},
      {"trim", [](const Value& v, CallArgs& a) {
         Arguments args(a, "trim", {"chars"});
         const Value chars = args.get_or(0, Value::none());
         const std::string s = str(v);
         if (chars.is_none()) return Value(std::string(py_strip(s, "", true, true, true)));
         return Value(std::string(py_strip(s, str(chars), false, true, true)));
       }},
      {"unique", [](const Value& v, CallArgs& a) {
         Arguments args(a, "unique", {"case_sensitive", "attribute"});
         const bool cs = truthy(args.get_or(0, Value(false)));
         const Value attr = args.get_or(1, Value::none());
         List out, seen;
         for (const Value& item : iterate(v)) {
           const Value k = sort_key(item, attr, cs);
           if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, k); })) continue;
           seen.push_back(k);
           out.push_back(item);
         }
         return Value::list(std::move(out));
       }},
      {"upper", [](const Value& v, CallArgs& a) { no_args(a, "upper"); return Value(py_upper(str(v))); }},
  };
  return table;
}

bool one_arg_compare(const Value& v, CallArgs& a, const char* name, int want_sign, bool equal_ok) {
  Arguments args(a, name, {"other"});
  const Value* o = args.get(0);
  if (!o) fault("the test {} needs a value to compare with", name);
  const int c = compare(v, *o);
  return c == want_sign || (equal_ok && c == 0);
}

// str(v).islower() / .isupper(), through the str methods.
bool string_predicate(const Value& v, const char* method) {
  CallArgs none;
  return truthy(attribute_of(Value(str(v)), method).function()(none));
}

const std::map<std::string_view, TestFn>& tests() {
  static const std::map<std::string_view, TestFn> table = {
      {"boolean", [](const Value& v, CallArgs&) { return v.kind() == Value::Kind::Bool; }},
      {"callable", [](const Value& v, CallArgs&) { return v.kind() == Value::Kind::Function; }},
      {"defined", [](const Value& v, CallArgs&) { return !v.is_undefined(); }},
      {"divisibleby", [](const Value& v, CallArgs& a) {
         Arguments args(a, "divisibleby", {"num"});
         const Value* n = args.get(0);
         if (!n || !n->is_integer() || !v.is_integer()) fault("divisibleby needs integers");
         if (n->integer() == 0) fault("integer modulo by zero");
         return v.integer() % n->integer() == 0;
       }},
      {"eq", [](const Value& v, CallArgs& a) {
         Arguments args(a, "eq", {"other"});
         const Value* o = args.get(0);
         if (!o) fault("the test eq needs a value to compare with");
         return equal(v, *o);
       }},
      {"escaped", [](const Value&, CallArgs&) { return false; }},
      {"even", [](const Value& v, CallArgs&) {
         if (!v.is_integer()) fault("the test even needs an integer, not {}", type_name(v));
         return v.integer() % 2 == 0;
       }},
      {"false", [](const Value& v, CallArgs&) { return v.kind() == Value::Kind::Bool && !v.boolean(); }},
      {"filter", [](const Value& v, CallArgs&) { return v.is_string() && has_filter(v.str()); }},
      {"float", [](const Value& v, CallArgs&) { return v.kind() == Value::Kind::Float; }},
      {"ge", [](const Value& v, CallArgs& a) { return one_arg_compare(v, a, "ge", 1, true); }},
      {"gt", [](const Value& v, CallArgs& a) { return one_arg_compare(v, a, "gt", 1, false); }},
      {"in", [](const Value& v, CallArgs& a) {
         Arguments args(a, "in", {"seq"});
         const Value* s = args.get(0);
         if (!s) fault("the test in needs a sequence");
         if (s->is_string()) {
           if (!v.is_string()) fault("'in <string>' requires string as left operand, not {}", type_name(v));
           return s->str().find(v.str()) != std::string::npos;
         }
         for (const Value& item : iterate(*s))
           if (equal(item, v)) return true;
         return false;
       }},
      {"integer", [](const Value& v, CallArgs&) { return v.kind() == Value::Kind::Int; }},
      {"iterable", [](const Value& v, CallArgs&) {
         return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict();
       }},
      {"le", [](const Value& v, CallArgs& a) { return one_arg_compare(v, a, "le", -1, true); }},
      {"lower", [](const Value& v, CallArgs&) { return string_predicate(v, "islower"); }},
      {"lt", [](const Value& v, CallArgs& a) { return one_arg_compare(v, a, "lt", -1, false); }},
      {"mapping", [](const Value& v, CallArgs&) { return v.is_dict(); }},
      {"ne", [](const Value& v, CallArgs& a) {
         Arguments args(a, "ne", {"other"});
         const Value* o = args.get(0);
         if (!o) fault("the test ne needs a value to compare with");
         return !equal(v, *o);
       }},
      {"none", [](const Value& v, CallArgs&) { return v.is_none(); }},
      {"number", [](const Value& v, CallArgs&) { return v.is_number(); }},
      {"odd", [](const Value& v, CallArgs&) {
         if (!v.is_integer()) fault("the test odd needs an integer, not {}", type_name(v));
         return v.integer() % 2 != 0;
       }},
      {"sameas", [](const Value& v, CallArgs& a) {
         Arguments args(a, "sameas", {"other"});
         const Value* o = args.get(0);
         if (!o) fault("the test sameas needs a value");
         if (v.kind() != o->kind()) return false;
         if (v.is_none() || v.is_undefined()) return true;
         if (v.kind() == Value::Kind::Bool) return v.boolean() == o->boolean();
         fault("the test sameas is supported for none, true and false only");
       }},
      {"sequence", [](const Value& v, CallArgs&) {
         return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict();
       }},
      {"string", [](const Value& v, CallArgs&) { return v.is_string(); }},
      {"test", [](const Value& v, CallArgs&) { return v.is_string() && has_test(v.str()); }},
      {"true", [](const Value& v, CallArgs&) { return v.kind() == Value::Kind::Bool && v.boolean(); }},
      {"undefined", [](const Value& v, CallArgs&) { return v.is_undefined(); }},
      {"upper", [](const Value& v, CallArgs&) { return string_predicate(v, "isupper"); }},
  };
  return table;
}

// Other names jinja2 gives the same filters and tests.
std::string_view canonical_filter(std::string_view name) { return name == "d" ? "default" : name; }
std::string_view canonical_test(std::string_view name) {
  if (name == "==" || name == "equalto") return "eq";
  if (name == "!=") return "ne";
  if (name == "<" || name == "lessthan") return "lt";
  if (name == "<=") return "le";
  if (name == ">" || name == "greaterthan") return "gt";
  if (name == ">=") return "ge";
  return name;
}

}  // namespace

bool has_filter(std::string_view name) { return filters().count(canonical_filter(name)) > 0; }
bool has_test(std::string_view name) { return tests().count(canonical_test(name)) > 0; }

Value apply_filter(std::string_view name, const Value& input, CallArgs& args) {
  const auto it = filters().find(canonical_filter(name));
  if (it == filters().end()) fault("no filter named '{}'", name);
  return it->second(input, args);
}

bool apply_test(std::string_view name, const Value& input, CallArgs& args) {
  const auto it = tests().find(canonical_test(name));
  if (it == tests().end()) fault("no test named '{}'", name);
  return it->second(input, args);
}

}  // namespace tk::jinja
