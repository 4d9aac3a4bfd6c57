// Attribute and item lookup as jinja2 resolves them, and the methods of str, dict and list a template may call
// (builtins.h). Methods that would modify a dict or a list fault when called, as in transformers' immutable sandbox.
#include <algorithm>

#include <unicode/uchar.h>

#include "data/chat_template/builtins.h"
#include "data/chat_template/py_text.h"

namespace tk::jinja {

Arguments::Arguments(CallArgs& args, std::string_view function, std::initializer_list<const char*> names, size_t skip)
    : args_(args), function_(function), names_(names), skip_(skip) {
  if (args.positional.size() > skip + names_.size())
    fault("{}() takes at most {} arguments ({} given)", function_, names_.size(), args.positional.size() - skip);
  for (const auto& entry : args.named) {
    const auto& key = entry.first;  // a name, not a structured binding: a lambda may capture it
    const auto at = std::find_if(names_.begin(), names_.end(), [&](const char* n) { return key == n; });
    if (at == names_.end()) fault("{}() got an unexpected keyword argument '{}'", function_, key);
    if (size_t(at - names_.begin()) + skip < args.positional.size())
      fault("{}() got multiple values for argument '{}'", function_, key);
  }
}

const Value* Arguments::get(size_t i) const {
  if (i + skip_ < args_.positional.size()) return &args_.positional[i + skip_];
  for (const auto& [key, value] : args_.named)
    if (key == names_[i]) return &value;
  return nullptr;
}

Value Arguments::get_or(size_t i, Value otherwise) const {
  const Value* v = get(i);
  return v ? *v : otherwise;
}

namespace {

const std::string& need_string(const Value& v, const std::string& function, const char* what) {
  if (!v.is_string()) fault("{}() {} must be str, not {}", function, what, type_name(v));
  return v.str();
}

int64_t need_int(const Value& v, const std::string& function) {
  if (!v.is_integer()) fault("{}() expects an integer, not {}", function, type_name(v));
  return v.integer();
}

// Python's is* methods: every code point passes, and there is at least one.
template <class Pred>
bool all_code_points(const std::string& s, Pred pred) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size();) {
    const CodePoint c = code_point_at(s, i);
    if (!pred(c.value)) return false;
    i += c.bytes;
  }
  return true;
}

// islower/isupper: some cased code point, and none of the other case.
bool cased_as(const std::string& s, bool upper) {
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    const CodePoint c = code_point_at(s, i);
    const UChar32 v = UChar32(c.value);
    if (u_isupper(v) || u_istitle(v)) {
      if (!upper) return false;
      cased = true;
    } else if (u_islower(v)) {
      if (upper) return false;
      cased = true;
    }
    i += c.bytes;
  }
  return cased;
}

Value string_method(const Value& self, const std::string& name) {
  const std::string fn = "str." + name;
  auto method = [&](auto body) { return Value::function(fn, [self, fn, body](CallArgs& a) { return body(self.str(), a, fn); }); };
  auto strip = [&](bool left, bool right) {
    return method([left, right](const std::string& s, CallArgs& a, const std::string& f) {
      Arguments args(a, f, {"chars"});
      const Value chars = args.get_or(0, Value::none());
      if (chars.is_none()) return Value(std::string(py_strip(s, "", true, left, right)));
      return Value(std::string(py_strip(s, need_string(chars, f, "chars"), false, left, right)));
    });
  };
  auto affix = [&](bool starts) {
    return method([starts](const std::string& s, CallArgs& a, const std::string& f) {
      Arguments args(a, f, {"prefix"});
      const Value* p = args.get(0);
      if (!p) fault("{}() takes at least 1 argument (0 given)", f);
      auto test = [&](const Value& v) {
        const std::string& x = need_string(v, f, "argument");
        return starts ? s.compare(0, x.size(), x) == 0 && s.size() >= x.size()
                      : s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
      };
      if (p->kind() == Value::Kind::Tuple) {
        for (const Value& v : p->items())
          if (test(v)) return Value(true);
        return Value(false);
      }
      return Value(test(*p));
    });
  };
  auto split = [&](bool from_right) {
    return method([from_right](const std::string& s, CallArgs& a, const std::string& f) {
      Arguments args(a, f, {"sep", "maxsplit"});
      const Value sep = args.get_or(0, Value::none());
      const int64_t maxsplit = need_int(args.get_or(1, Value(-1)), f);
      std::vector<std::string> parts;
      if (sep.is_none()) {
        parts = py_split(s, "", true, maxsplit, from_right);
      } else {
        const std::string& sp = need_string(sep, f, "separator");
        if (sp.empty()) fault("empty separator");
        parts = py_split(s, sp, false, maxsplit, from_right);
      }
      List out;
      for (auto& p : parts) out.emplace_back(std::move(p));
      return Value::list(std::move(out));
    });
  };
  auto no_args = [&](auto op) {
    return method([op](const std::string& s, CallArgs& a, const std::string& f) {
      Arguments args(a, f, {});
      return op(s);
    });
  };
  auto find = [&](bool from_right, bool must) {
    return method([from_right, must](const std::string& s, CallArgs& a, const std::string& f) {
      Arguments args(a, f, {"sub"});
      const Value* sub = args.get(0);
      if (!sub) fault("{}() takes at least 1 argument (0 given)", f);
      const std::string& x = need_string(*sub, f, "argument");
      const size_t at = from_right ? s.rfind(x) : s.find(x);
      if (at == s.npos) {
        if (must) fault("substring not found");
        return Value(int64_t(-1));
      }
      return Value(int64_t(code_points(std::string_view(s).substr(0, at))));
    });
  };
  if (name == "strip") return strip(true, true);
  if (name == "lstrip") return strip(true, false);
  if (name == "rstrip") return strip(false, true);
  if (name == "startswith") return affix(true);
  if (name == "endswith") return affix(false);
  if (name == "split") return split(false);
  if (name == "rsplit") return split(true);
  if (name == "find") return find(false, false);
  if (name == "rfind") return find(true, false);
  if (name == "index") return find(false, true);
  if (name == "rindex") return find(true, true);
  if (name == "upper") return no_args([](const std::string& s) { return Value(py_upper(s)); });
  if (name == "lower") return no_args([](const std::string& s) { return Value(py_lower(s)); });
  if (name == "title") return no_args([](const std::string& s) { return Value(py_title(s)); });
  if (name == "capitalize") return no_args([](const std::string& s) { return Value(py_capitalize(s)); });
  if (name == "isspace")
    return no_args([](const std::string& s) { return Value(all_code_points(s, [](uint32_t c) { return py_isspace(c); })); });
  if (name == "isdigit")
    return no_args([](const std::string& s) { return Value(all_code_points(s, [](uint32_t c) { return bool(u_isdigit(UChar32(c))); })); });
  if (name == "isalpha")
    return no_args([](const std::string& s) { return Value(all_code_points(s, [](uint32_t c) { return bool(u_isalpha(UChar32(c))); })); });
  if (name == "isalnum")
    return no_args([](const std::string& s) {
      return Value(all_code_points(s, [](uint32_t c) { return u_isalpha(UChar32(c)) || u_isdigit(UChar32(c)); }));
    });
  if (name == "islower") return no_args([](const std::string& s) { return Value(cased_as(s, false)); });
  if (name == "isupper") return no_args([](const std::string& s) { return Value(cased_as(s, true)); });
  if (name == "replace")
    return method([](const std::string& s, CallArgs& a, const std::string& f) {
      Arguments args(a, f, {"old", "new", "count"});
      const Value *old = args.get(0), *with = args.get(1);
      if (!old || !with) fault("{}() takes at least 2 arguments", f);
      return Value(py_replace(s, need_string(*old, f, "old"), need_string(*with, f, "new"),
                              need_int(args.get_or(2, Value(-1)), f)));
    });
  if (name == "count")
    return method([](const std::string& s, CallArgs& a, const std::string& f) {
      Arguments args(a, f, {"sub"});
      const Value* sub = args.get(0);
      if (!sub) fault("{}() takes at least 1 argument (0 given)", f);
      const std::string& x = need_string(*sub, f, "argument");
      if (x.empty()) return Value(int64_t(code_points(s) + 1));
      int64_t n = 0;
      for (size_t at = s.find(x); at != s.npos; at = s.find(x, at + x.size())) n++;
      return Value(n);
    });
  if (name == "join")
    return method([](const std::string& s, CallArgs& a, const std::string& f) {
      Arguments args(a, f, {"iterable"});
      const Value* it = args.get(0);
      if (!it) fault("{}() takes exactly one argument (0 given)", f);
      std::string out;
      bool first = true;
      for (const Value& v : iterate(*it)) {
        out += (first ? "" : s) + need_string(v, f, "sequence item");
        first = false;
      }
      return Value(std::move(out));
    });
  if (name == "splitlines")
    return method([](const std::string& s, CallArgs& a, const std::string& f) {
      Arguments args(a, f, {"keepends"});
      List out;
      for (auto& line : py_splitlines(s, truthy(args.get_or(0, Value(false))))) out.emplace_back(std::move(line));
      return Value::list(std::move(out));
    });
  if (name == "format" || name == "format_map")
    return Value::function(fn, [fn](CallArgs&) -> Value { fault("{}() is not supported in chat templates", fn); });
  return Value::undefined(fmt::format("'str object' has no attribute '{}'", name));
}

[[noreturn]] void modifies(const std::string& fn) {
  fault("{}() would modify a value: chat templates run in an immutable sandbox, as in transformers", fn);
}

Value dict_method(const Value& self, const std::string& name) {
  const std::string fn = "dict." + name;
  if (name == "get")
    return Value::function(fn, [self, fn](CallArgs& a) {
      Arguments args(a, fn, {"key", "default"});
      const Value* key = args.get(0);
      if (!key) fault("{}() takes at least 1 argument (0 given)", fn);
      const Value* found = self.dict().find(*key);
      return found ? *found : args.get_or(1, Value::none());
    });
  auto listing = [&](int what) {  // 0 keys, 1 values, 2 items
    return Value::function(fn, [self, fn, what](CallArgs& a) {
      Arguments args(a, fn, {});
      List out;
      for (const auto& [k, v] : self.dict().entries)
        out.push_back(what == 0 ? k : what == 1 ? v : Value::list({k, v}, true));
      return Value::list(std::move(out));
    });
  };
  if (name == "keys") return listing(0);
  if (name == "values") return listing(1);
  if (name == "items") return listing(2);
  if (name == "copy") return Value::function(fn, [self](CallArgs&) { return self; });
  for (const char* m : {"update", "pop", "popitem", "setdefault", "clear"})
    if (name == m) return Value::function(fn, [fn](CallArgs&) -> Value { modifies(fn); });
  return Value();
}

Value list_method(const Value& self, const std::string& name) {
  const std::string fn = "list." + name;
  if (name == "index" || name == "count")
    return Value::function(fn, [self, fn, count = name == "count"](CallArgs& a) {
      Arguments args(a, fn, {"value"});
      const Value* x = args.get(0);
      if (!x) fault("{}() takes exactly one argument (0 given)", fn);
      int64_t n = 0;
      const List& items = self.items();
      for (size_t i = 0; i < items.size(); i++)
        if (equal(items[i], *x)) {
          if (!count) return Value(int64_t(i));
          n++;
        }
      if (!count) fault("{} is not in list", repr(*x));
      return Value(n);
    });
  for (const char* m : {"append", "extend", "insert", "pop", "remove", "sort", "reverse", "clear"})
    if (name == m) return Value::function(fn, [fn](CallArgs&) -> Value { modifies(fn); });
  return Value();
}

// Python's slice.indices() for a sequence of n items.
std::vector<int64_t> slice_positions(int64_t n, const Value* start, const Value* stop, const Value* step) {
  auto bound = [](const Value* v) -> const Value* { return v && !v->is_none() ? v : nullptr; };
  start = bound(start), stop = bound(stop), step = bound(step);
  for (const Value* v : {start, stop, step})
    if (v && !v->is_integer()) fault("slice indices must be integers or None, not {}", type_name(*v));
  const int64_t s = step ? step->integer() : 1;
  if (s == 0) fault("slice step cannot be zero");
  auto clamp = [&](const Value* v, int64_t otherwise) {
    if (!v) return otherwise;
    int64_t i = v->integer();
    if (i < 0) i += n;
    if (s > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t lo = clamp(start, s > 0 ? 0 : n - 1), hi = clamp(stop, s > 0 ? n : -1);
  std::vector<int64_t> out;
  for (int64_t i = lo; s > 0 ? i < hi : i > hi; i += s) out.push_back(i);
  return out;
}

}  // namespace

Value attribute_of(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::Undefined: undefined_fault(obj);
    case Value::Kind::String: return string_method(obj, name);
    case Value::Kind::Dict: {
      Value m = dict_method(obj, name);
      if (!m.is_undefined()) return m;
      if (const Value* v = obj.dict().find(std::string_view(name))) return *v;
      return Value::undefined(fmt::format("'dict object' has no attribute '{}'", name));
    }
    case Value::Kind::List:
    case Value::Kind::Tuple: {
      Value m = list_method(obj, name);
      if (!m.is_undefined()) return m;
      return Value::undefined(fmt::format("'{} object' has no attribute '{}'", type_name(obj), name));
    }
    case Value::Kind::Namespace: {
      if (const Value* v = obj.ns().attributes.find(std::string_view(name))) return *v;
      return Value::undefined(fmt::format("'Namespace object' has no attribute '{}'", name));
    }
    default: return Value::undefined(fmt::format("'{} object' has no attribute '{}'", type_name(obj), name));
  }
}

Value item_of(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Value::Kind::Undefined: undefined_fault(obj);
    case Value::Kind::Dict:
      if (const Value* v = obj.dict().find(key)) return *v;
      break;
    case Value::Kind::List:
    case Value::Kind::Tuple:
      if (key.is_integer()) {
        const int64_t n = int64_t(obj.items().size());
        const int64_t i = key.integer() < 0 ? key.integer() + n : key.integer();
        if (i >= 0 && i < n) return obj.items()[size_t(i)];
        return Value::undefined(fmt::format("{} object has no element {}", type_name(obj), key.integer()));
      }
      break;
    case Value::Kind::String:
      if (key.is_integer()) {
        const std::vector<size_t> at = code_point_offsets(obj.str());
        const int64_t n = int64_t(at.size()) - 1;
        const int64_t i = key.integer() < 0 ? key.integer() + n : key.integer();
        if (i >= 0 && i < n) return Value(obj.str().substr(at[size_t(i)], at[size_t(i) + 1] - at[size_t(i)]));
        return Value::undefined(fmt::format("str object has no element {}", key.integer()));
      }
      break;
    default: break;
  }
  if (key.is_string()) {
    Value a = attribute_of(obj, key.str());
    if (!a.is_undefined()) return a;
  }
  return Value::undefined(fmt::format("{} object has no element {}", type_name(obj), repr(key)));
}

Value slice_of(const Value& obj, const Value* start, const Value* stop, const Value* step) {
  if (obj.is_undefined()) undefined_fault(obj);
  if (obj.is_sequence()) {
    List out;
    for (int64_t i : slice_positions(int64_t(obj.items().size()), start, stop, step)) out.push_back(obj.items()[size_t(i)]);
    return Value::list(std::move(out), obj.kind() == Value::Kind::Tuple);
  }
  if (obj.is_string()) {
    const std::string& s = obj.str();
    const std::vector<size_t> at = code_point_offsets(s);
    std::string out;
    for (int64_t i : slice_positions(int64_t(at.size()) - 1, start, stop, step))
      out += s.substr(at[size_t(i)], at[size_t(i) + 1] - at[size_t(i)]);
    return Value(std::move(out));
  }
  return Value::undefined(fmt::format("{} object cannot be sliced", type_name(obj)));
}

}  // namespace tk::jinja
