// File names read out of data files (the shards listed in meta.json, the weight files of a sharded
// model.safetensors.index.json) resolved inside the directory that holds the listing, and refused when
// they lead out of it: a downloaded dataset that names /etc/passwd or ../../.ssh/id_rsa must not make
// tokamak open that file.
#pragma once
#include <string>
#include <string_view>

namespace tk {

// dir/name, when `name` is a relative path with no ".." component and what it names (symbolic links
// followed) lies inside `dir`; else a tk::Error naming `source` (the listing file) and `name`.
std::string path_inside(const std::string& dir, const std::string& name, std::string_view source);

}  // namespace tk
