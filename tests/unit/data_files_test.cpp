// The data loaders' one verdict on a file (src/data/files.hpp), for the IDX (Fashion-MNIST) and the
// CIFAR-10 loaders alike: a file that is not there "does not exist"; one that is there but cannot
// be read says why in the OS's words (strerror), never that it does not exist; a directory where
// a file is expected says so.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>

#include "cifar_files.hpp"
#include "distop/core/error.hpp"
#include "distop/data/cifar.hpp"
#include "distop/data/idx.hpp"
#include "small_idx_dataset.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using distop::test::TempDir;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const distop::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

// The CIFAR-10 and the IDX data set in dir / "cifar" and dir / "idx"; `file` of each, where it is
// a file name, is one of the training split's.
const char* kCifarFile = "data_batch_1.bin";
const char* kIdxFile = "train-images-idx3-ubyte";

void write_both(const fs::path& dir) {
  distop::test::write_cifar10_dir(dir / "cifar", 2, 2, 1);
  distop::test::write_small_idx_dataset(dir / "idx", 16);
}

// Both loaders' messages for their data set in `dir`, and the reading functions' for the file.
struct Messages {
  std::string cifar_load, idx_load, cifar_read, idx_read;
};
Messages messages(const fs::path& dir) {
  return {
      error_of([&] { distop::data::load_cifar10((dir / "cifar").string(), true); }),
      error_of([&] { distop::data::load_mnist_like((dir / "idx").string(), true); }),
      error_of([&] { distop::data::read_cifar10_batch((dir / "cifar" / kCifarFile).string()); }),
      error_of([&] { distop::data::read_idx((dir / "idx" / kIdxFile).string()); })};
}

void expect_all(const Messages& m, const std::string& needle, bool missing) {
  for (const std::string* s : {&m.cifar_load, &m.idx_load, &m.cifar_read, &m.idx_read}) {
    EXPECT_NE(s->find(needle), std::string::npos) << *s;
    EXPECT_EQ(s->find("does not exist") != std::string::npos, missing) << *s;
  }
}

}  // namespace

TEST(DataFiles, AMissingFileDoesNotExist) {
  TempDir dir("data_files");
  write_both(dir.path());
  fs::remove(dir.path() / "cifar" / kCifarFile);
  fs::remove(dir.path() / "idx" / kIdxFile);
  const Messages m = messages(dir.path());
  expect_all(m, "does not exist", true);
  EXPECT_NE(m.idx_load.find("has neither"), std::string::npos) << m.idx_load;
}

// A loop of symbolic links: the file is there, and no one, root included, can read it.
TEST(DataFiles, AFileThatCannotBeReadSaysWhy) {
  TempDir dir("data_files");
  write_both(dir.path());
  for (const fs::path& f : {dir.path() / "cifar" / kCifarFile, dir.path() / "idx" / kIdxFile}) {
    fs::remove(f);
    fs::create_symlink(f.filename(), f);  // itself
  }
  expect_all(messages(dir.path()), std::strerror(ELOOP), false);
}

TEST(DataFiles, ADirectoryWhereAFileIsExpectedSaysSo) {
  TempDir dir("data_files");
  write_both(dir.path());
  for (const fs::path& f : {dir.path() / "cifar" / kCifarFile, dir.path() / "idx" / kIdxFile}) {
    fs::remove(f);
    fs::create_directory(f);
  }
  expect_all(messages(dir.path()), "is a directory, expected", false);
}

// A data set directory without permissions: "Permission denied", not "does not exist" (the
// CIFAR-10 loader once said "data_batch_1.bin does not exist"). Permission bits do not stop root,
// so as root this case cannot be made; the loop of symbolic links above is the unreadable file that
// every user meets.
TEST(DataFiles, ADirectoryWithoutPermissionSaysPermissionDenied) {
  if (::geteuid() == 0)
    GTEST_SKIP()
        << "running as root, whom permission bits do not stop (AFileThatCannotBeReadSaysWhy "
           "covers an unreadable file for every user)";
  TempDir dir("data_files");
  write_both(dir.path());
  for (const char* sub : {"cifar", "idx"}) fs::permissions(dir.path() / sub, fs::perms::none);
  const Messages m = messages(dir.path());
  for (const char* sub : {"cifar", "idx"}) fs::permissions(dir.path() / sub, fs::perms::owner_all);
  expect_all(m, std::strerror(EACCES), false);
}
