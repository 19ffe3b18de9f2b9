// What the fuzz targets share: the readers under test take a path, so each input is first written
// to a file in a directory of this process's own (removed when the process exits normally).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "temp_dir.hpp"

namespace distop::fuzz {

inline const test::TempDir& scratch() {
  static const test::TempDir dir("distop_fuzz");
  return dir;
}

// Replaces the contents of the scratch directory's file `name` with data[0 .. size) and returns
// its path.
inline std::string write_input(const std::uint8_t* data, std::size_t size,
                               const std::string& name = "input") {
  const std::string path = scratch().file(name);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  const bool ok = size == 0 || std::fwrite(data, 1, size, f) == size;
  if (std::fclose(f) != 0 || !ok) std::abort();
  return path;
}

}  // namespace distop::fuzz
