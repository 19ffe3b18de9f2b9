// What the fuzz targets share: the readers under test take a path, so each input is first written
// to a file of this process's own.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace distop::fuzz {

// A temporary file named after the process, removed when the process exits normally.
class InputFile {
 public:
  InputFile()
      : path_(
            (std::filesystem::temp_directory_path() / ("distop-fuzz-" + std::to_string(::getpid())))
                .string()) {}
  ~InputFile() { std::remove(path_.c_str()); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  // Replaces the file's contents with data[0 .. size) and returns its path.
  const std::string& write(const std::uint8_t* data, std::size_t size) const {
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    if (f == nullptr) std::abort();
    const bool ok = size == 0 || std::fwrite(data, 1, size, f) == size;
    if (std::fclose(f) != 0 || !ok) std::abort();
    return path_;
  }

 private:
  std::string path_;
};

inline const std::string& write_input(const std::uint8_t* data, std::size_t size) {
  static const InputFile file;
  return file.write(data, size);
}

}  // namespace distop::fuzz
