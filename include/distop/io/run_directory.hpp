#pragma once
// A run's hold on its output directory: one run at a time per checkpoint directory (an advisory
// lock), and the clean-up of the temporary files a killed run leaves behind.

#include <cstddef>
#include <string>

namespace distop::io {

// An advisory lock (flock(2), exclusive) on the file "<dir>/.distop.lock", held while the object
// lives (and released by the kernel if the process dies). Two runs that keep checkpoints in one
// directory would overwrite each other's checkpoints and metrics; the second one to take the lock
// gets an error instead. Local: the rank that writes takes it (train::fit: rank 0). The lock file
// holds the holder's host name and process id, for the message. Advisory locks work on local file
// systems and NFSv4; a file system that does not support them makes acquire an error.
class DirectoryLock {
 public:
  // Takes the lock on `dir` (which must exist). Throws distop::Error(op) "<dir> is in use by
  // another run (<host> process <pid> holds <dir>/.distop.lock); ..." when another open file
  // description holds it, or when the lock file cannot be created.
  static DirectoryLock acquire(const std::string& dir, const std::string& op);

  DirectoryLock() = default;
  DirectoryLock(DirectoryLock&& other) noexcept;
  DirectoryLock& operator=(DirectoryLock&& other) noexcept;
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;
  ~DirectoryLock();

  bool held() const noexcept { return fd_ >= 0; }
  // The lock file's path ("" when not held).
  const std::string& path() const noexcept { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

// The lock file of a directory: "<dir>/.distop.lock".
std::string lock_path(const std::string& dir);

// Removes the files of `dir` (not of its subdirectories) named "<anything>.tmp.<digits>": what a
// run killed while writing a checkpoint, a weights file or a metrics file atomically leaves
// (write_safetensors, train::MetricsCsv). Call it only while holding the directory's lock, so no
// live writer's file is removed. Returns the number of files removed; a file that cannot be
// removed is left (not an error). Local.
std::size_t remove_stale_temporaries(const std::string& dir);

}  // namespace distop::io
