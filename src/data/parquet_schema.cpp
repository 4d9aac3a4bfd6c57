// The schema tree and the column shapes tokamak reads (parquet_schema.h). The list forms follow the format's
// LogicalTypes.md, backward-compatibility rules included: in a LIST-annotated group, the repeated child is the
// element itself when it is a group of several fields or is named "array" or "<list>_tuple"; otherwise its one
// child is the element. A repeated group outside a LIST is a required list of required elements.
#include "data/parquet_schema.h"

#include <iterator>

#include <fmt/format.h>

#include "core/error.h"

namespace tk::parquet {
namespace {

bool is_group(const SchemaElement& e) { return !e.type; }

Repetition repetition_of(const SchemaElement& e) { return Repetition(e.repetition.value_or(0)); }

bool is_list_annotated(const SchemaElement& e) {
  return e.logical_type == kLogicalList || e.converted_type == kConvertedList;
}

std::string logical_name(int32_t member) {
  static const char* const kNames[] = {"",     "STRING",    "MAP",     "LIST",     "ENUM",     "DECIMAL", "DATE",
                                       "TIME", "TIMESTAMP", "",        "INTEGER",  "UNKNOWN",  "JSON",    "BSON",
                                       "UUID", "FLOAT16",   "VARIANT", "GEOMETRY", "GEOGRAPHY"};
  if (member > 0 && member < int32_t(std::size(kNames)) && *kNames[member]) return kNames[member];
  return fmt::format("logical type {}", member);
}

// What a column is, for an error that says what it is instead of a string: "a list", "INT64", ...
std::string describe(const SchemaNode& n) {
  const SchemaElement& e = n.element;
  if (is_group(e)) {
    if (is_list_annotated(e)) return "a list";
    if (e.logical_type == 2 || e.converted_type == 1 || e.converted_type == 2) return "a map";
    return repetition_of(e) == Repetition::Repeated ? "a repeated group (a list of structs)" : "a struct";
  }
  std::string s = physical_type_name(*e.type);
  if (e.logical_type) s += " (" + logical_name(*e.logical_type) + ")";
  if (repetition_of(e) == Repetition::Repeated) s = "a repeated (list) field of " + s;
  return s;
}

bool is_text_annotation(const SchemaElement& e) {
  if (e.logical_type)
    return *e.logical_type == kLogicalString || *e.logical_type == kLogicalEnum || *e.logical_type == kLogicalJson;
  if (e.converted_type)
    return *e.converted_type == kConvertedUtf8 || *e.converted_type == kConvertedEnum ||
           *e.converted_type == kConvertedJson;
  return true;  // plain BYTE_ARRAY: many writers store strings without the annotation
}

StringColumn string_leaf(const SchemaNode& n, const std::string& name, const char* role) {
  const SchemaElement& e = n.element;
  const bool text = !is_group(e) && *e.type == int32_t(PhysicalType::ByteArray) && is_text_annotation(e) &&
                    repetition_of(e) != Repetition::Repeated;
  if (!text) fail("column \"{}\" is {}, not {}", name, describe(n), role);
  TK_CHECK(n.definition <= 255 && n.repetition <= 255, "column \"{}\" is nested too deeply", name);
  StringColumn c;
  c.name = name;
  c.leaf = n.leaf;
  c.levels.max_definition = n.definition;
  c.levels.max_repetition = n.repetition;
  return c;
}

}  // namespace

Schema::Schema(const std::vector<SchemaElement>& elements) {
  TK_CHECK(!elements.empty(), "the schema has no elements");
  TK_CHECK(is_group(elements[0]), "the schema's root is a column, not a group");
  struct Open {
    int node, children_left;
  };
  nodes_.push_back({elements[0], -1, {}, -1, 0, 0, ""});
  std::vector<Open> open{{0, elements[0].num_children}};
  for (size_t i = 1; i < elements.size(); i++) {
    while (!open.empty() && open.back().children_left == 0) open.pop_back();
    TK_CHECK(!open.empty(), "the schema has {} elements, more than its child counts say", elements.size());
    const SchemaElement& e = elements[i];
    TK_CHECK(e.repetition, "schema element \"{}\" has no repetition type", e.name);
    TK_CHECK(is_group(e) || e.num_children == 0, "schema element \"{}\" has a type and children", e.name);
    const int parent = open.back().node;
    open.back().children_left--;
    const SchemaNode& p = nodes_[size_t(parent)];
    SchemaNode n{e, parent, {}, -1, p.definition, p.repetition, parent == 0 ? e.name : p.path + "." + e.name};
    if (repetition_of(e) != Repetition::Required) n.definition++;
    if (repetition_of(e) == Repetition::Repeated) n.repetition++;
    const int index = int(nodes_.size());
    if (!is_group(e)) {
      n.leaf = int(leaves_.size());
      leaves_.push_back(index);
    }
    nodes_[size_t(parent)].children.push_back(index);
    nodes_.push_back(std::move(n));
    if (is_group(e)) open.push_back({index, e.num_children});
  }
  for (const Open& o : open)
    TK_CHECK(o.children_left == 0, "the schema's group \"{}\" lacks {} of its children", nodes_[size_t(o.node)].path,
             o.children_left);
}

std::optional<int> Schema::top_level(const std::string& name) const {
  for (int c : nodes_[0].children)
    if (nodes_[size_t(c)].element.name == name) return c;
  return std::nullopt;
}

std::vector<std::string> Schema::top_level_names() const {
  std::vector<std::string> names;
  for (int c : nodes_[0].children) names.push_back(nodes_[size_t(c)].element.name);
  return names;
}

StringColumn find_string_column(const Schema& schema, const std::string& name) {
  const std::optional<int> n = schema.top_level(name);
  TK_CHECK(n, "there is no column \"{}\"", name);
  return string_leaf(schema.node(*n), name, "a string column (BYTE_ARRAY, STRING)");
}

MessagesColumn find_messages_column(const Schema& schema, const std::string& name) {
  const std::optional<int> top = schema.top_level(name);
  TK_CHECK(top, "there is no column \"{}\"", name);
  const SchemaNode& t = schema.node(*top);
  const char* shape = "a list of {role, content} structs (list<struct<role: string, content: string>>)";
  MessagesColumn m;
  m.name = name;
  int repeated = -1, element = -1;
  if (is_group(t.element) && is_list_annotated(t.element) && repetition_of(t.element) != Repetition::Repeated) {
    TK_CHECK(t.children.size() == 1, "column \"{}\" is a LIST group of {} fields, not one repeated field", name,
             t.children.size());
    repeated = t.children[0];
    const SchemaNode& r = schema.node(repeated);
    TK_CHECK(repetition_of(r.element) == Repetition::Repeated, "column \"{}\" is a LIST whose field is not repeated",
             name);
    if (!is_group(r.element)) fail("column \"{}\" is a list of {}, not {}", name, describe(r), shape);
    const bool two_level =
        r.children.size() != 1 || r.element.name == "array" || r.element.name == t.element.name + "_tuple";
    element = two_level ? repeated : r.children[0];
    m.list_defined = t.definition;
  } else if (is_group(t.element) && repetition_of(t.element) == Repetition::Repeated) {
    repeated = element = *top;
    m.list_defined = 0;  // a bare repeated group is never null
  } else {
    fail("column \"{}\" is {}, not {}", name, describe(t), shape);
  }
  const SchemaNode& el = schema.node(element);
  if (!is_group(el.element)) fail("column \"{}\" is a list of {}, not {}", name, describe(el), shape);
  TK_CHECK(!is_list_annotated(el.element) && (element == repeated || repetition_of(el.element) != Repetition::Repeated),
           "column \"{}\" nests lists deeper than one level, which tokamak does not read", name);
  TK_CHECK(schema.node(repeated).repetition == 1, "column \"{}\" is inside another list, which tokamak does not read",
           name);
  m.entry_defined = schema.node(repeated).definition;
  m.element_defined = el.definition;
  auto field = [&](const char* field_name) {
    std::string fields;
    for (int c : el.children) {
      const SchemaNode& f = schema.node(c);
      if (f.element.name == field_name) return string_leaf(f, f.path, "a string field");
      fields += (fields.empty() ? "" : ", ") + f.element.name;
    }
    fail("column \"{}\" holds structs without a \"{}\" field (they have: {})", name, field_name, fields);
  };
  m.role = field("role");
  m.content = field("content");
  return m;
}

}  // namespace tk::parquet
