// A Parquet file's schema as a tree (the footer stores it flattened, depth first, with child counts), each node's
// definition and repetition levels, and the two shapes of column tokamak reads: a flat string column, and a
// list of {role, content} structs (a chat set's `messages`) in the standard 3-level LIST form, the legacy 2-level
// form, or a bare repeated group. A column of another shape is a tk::Error saying what the column is instead.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "data/parquet_metadata.h"
#include "data/parquet_pages.h"

namespace tk::parquet {

struct SchemaNode {
  SchemaElement element;
  int parent = -1;
  std::vector<int> children;
  int leaf = -1;  // a primitive's column index (its column chunk in each row group); -1 for a group
  int definition = 0, repetition = 0;  // the maximum levels of the path down to and including this node
  std::string path;                    // dotted, from the top-level field: "messages.list.element.role"
};

class Schema {
 public:
  Schema() = default;
  // A tk::Error giving the reason when the elements do not form a tree.
  explicit Schema(const std::vector<SchemaElement>& elements);

  const SchemaNode& node(int i) const { return nodes_[size_t(i)]; }
  const std::vector<int>& leaves() const { return leaves_; }  // node indices, in column order
  std::optional<int> top_level(const std::string& name) const;
  std::vector<std::string> top_level_names() const;

 private:
  std::vector<SchemaNode> nodes_;  // node 0 is the root
  std::vector<int> leaves_;
};

// A flat string column: a top-level BYTE_ARRAY field, required or optional, annotated STRING (UTF8), ENUM, JSON
// or not at all.
struct StringColumn {
  std::string name;
  int leaf = 0;
  LeafColumn levels;  // codec unset: it is each chunk's
};

// A list of {role, content} structs. A row's list is null below definition level `list_defined`, holds an entry
// from `entry_defined` on, whose struct is not null from `element_defined` on.
struct MessagesColumn {
  std::string name;
  StringColumn role, content;  // their names are their dotted paths
  int list_defined = 0, entry_defined = 0, element_defined = 0;
};

// The column `name` as one of those shapes, or a tk::Error "column "NAME" is ..., not ..." (the caller adds the
// file). `name` must be a top-level field (Schema::top_level).
StringColumn find_string_column(const Schema& schema, const std::string& name);
MessagesColumn find_messages_column(const Schema& schema, const std::string& name);

}  // namespace tk::parquet
