#include "distop/data/cifar.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "collective_load.hpp"
#include "distop/core/error.hpp"
#include "files.hpp"

namespace distop::data {

namespace {

constexpr const char* kReadOp = "read_cifar10";
constexpr const char* kLoadOp = "load_cifar10";
constexpr std::int64_t kImageBytes = kCifar10RecordBytes - 1;
// Records read per fread: about 1 MiB.
constexpr std::size_t kChunkRecords = 341;

struct CloseFile {
  void operator()(std::FILE* f) const noexcept { std::fclose(f); }
};

std::vector<std::string> split_names(bool train) {
  if (!train) return {"test_batch.bin"};
  std::vector<std::string> names;
  for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  return names;
}

// Appends the records of `path` to `ds` (whose channels, rows and cols are CIFAR-10's).
void append_batch(const std::string& path, Dataset& ds) {
  const int fd = detail::open_for_reading(kReadOp, path, "a CIFAR-10 batch file");
  std::unique_ptr<std::FILE, CloseFile> file(::fdopen(fd, "rb"));
  if (file == nullptr) ::close(fd);
  DISTOP_CHECK(file != nullptr, kReadOp, "cannot read file ", path, ": ", std::strerror(errno));

  // Read to the end rather than trusting the size the file system reports, so that what is
  // checked is what was read.
  std::vector<std::uint8_t> chunk(kChunkRecords * static_cast<std::size_t>(kCifar10RecordBytes));
  std::int64_t records = 0;
  for (;;) {
    const std::size_t got = std::fread(chunk.data(), 1, chunk.size(), file.get());
    DISTOP_CHECK(!std::ferror(file.get()), kReadOp, "cannot read file ", path, ": ",
                 std::strerror(errno));
    const std::size_t whole = got / static_cast<std::size_t>(kCifar10RecordBytes);
    std::size_t at = ds.images.size();
    ds.images.resize(at + whole * static_cast<std::size_t>(kImageBytes));
    for (std::size_t r = 0; r < whole; ++r) {
      const std::uint8_t* rec = chunk.data() + r * static_cast<std::size_t>(kCifar10RecordBytes);
      DISTOP_CHECK(rec[0] < kCifar10Classes, kReadOp, "label ", int{rec[0]}, " of record ", records,
                   " (byte offset ", records * kCifar10RecordBytes, ") in file ", path,
                   " is out of range [0, ", kCifar10Classes - 1,
                   "]; not a CIFAR-10 batch file, or its records are misaligned");
      ds.labels.push_back(rec[0]);
      std::transform(rec + 1, rec + kCifar10RecordBytes,
                     ds.images.begin() + static_cast<std::ptrdiff_t>(at),
                     [](std::uint8_t v) { return static_cast<float>(v) / 255.0f; });
      at += static_cast<std::size_t>(kImageBytes);
      ++records;
    }
    if (got < chunk.size()) {
      const std::size_t rest = got - whole * static_cast<std::size_t>(kCifar10RecordBytes);
      DISTOP_CHECK(rest == 0, kReadOp, "file ", path, " has ",
                   records * kCifar10RecordBytes + static_cast<std::int64_t>(rest),
                   " bytes, not a whole number of ", kCifar10RecordBytes,
                   "-byte records (1 label byte and 3 x 32 x 32 image bytes): ", records,
                   " records and ", rest, " bytes of a record cut short");
      break;
    }
  }
  DISTOP_CHECK(records > 0, kReadOp, "file ", path, " is empty, expected ", kCifar10RecordBytes,
               "-byte records (1 label byte and 3 x 32 x 32 image bytes)");
  ds.size += records;
}

Dataset empty_cifar10() {
  Dataset ds;
  ds.channels = kCifar10Channels;
  ds.rows = kCifar10Side;
  ds.cols = kCifar10Side;
  return ds;
}

}  // namespace

std::vector<std::string> cifar10_files(const std::string& dir, bool train) {
  namespace fs = std::filesystem;
  const auto names = split_names(train);
  // A file that is there but cannot be looked up (a directory that may not be searched) is an
  // error saying why, not a missing file.
  const auto there = [](const fs::path& p) { return detail::exists(kLoadOp, p.string()); };
  fs::path base = dir;
  const bool any = std::any_of(names.begin(), names.end(),
                               [&](const std::string& n) { return there(base / n); });
  const fs::path released = base / "cifar-10-batches-bin";
  if (!any && there(released / names.front())) base = released;
  std::vector<std::string> paths;
  for (const auto& n : names) {
    const fs::path p = base / n;
    DISTOP_CHECK(there(p), kLoadOp, "CIFAR-10 file ", p.string(),
                 " does not exist; the data set directory ", dir,
                 " must hold data_batch_1.bin .. data_batch_5.bin and test_batch.bin (the binary "
                 "version, cifar-10-batches-bin)");
    paths.push_back(p.string());
  }
  return paths;
}

Dataset read_cifar10_batch(const std::string& path) {
  Dataset ds = empty_cifar10();
  append_batch(path, ds);
  return ds;
}

Dataset load_cifar10(const std::string& dir, bool train) {
  const auto paths = cifar10_files(dir, train);
  Dataset ds = empty_cifar10();
  std::error_code ec;
  std::uintmax_t bytes = 0;
  for (const auto& p : paths) bytes += std::filesystem::file_size(p, ec);
  // A hint only (read_cifar10_batch checks what it reads): one allocation for the whole split.
  if (!ec) ds.images.reserve(bytes / kCifar10RecordBytes * kImageBytes);
  try {
    for (const auto& p : paths) append_batch(p, ds);
  } catch (const Error& e) {
    throw Error(kLoadOp, e.detail());
  }
  return ds;
}

Dataset load_cifar10_collective(MPI_Comm comm, const std::string& dir, bool train) {
  return detail::load_collective(comm, kLoadOp, dir, [&] { return load_cifar10(dir, train); });
}

}  // namespace distop::data
