#include "distop/io/run_directory.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include "distop/core/error.hpp"

namespace distop::io {

std::string lock_path(const std::string& dir) {
  return (std::filesystem::path(dir) / ".distop.lock").string();
}

DirectoryLock DirectoryLock::acquire(const std::string& dir, const std::string& op) {
  DirectoryLock lock;
  lock.path_ = lock_path(dir);
  lock.fd_ = ::open(lock.path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  DISTOP_CHECK(lock.fd_ >= 0, op, "cannot create the lock file ", lock.path_, ": ",
               std::strerror(errno));
  int rc = 0;
  do {
    rc = ::flock(lock.fd_, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int error = errno;
    std::string holder;
    if (error == EWOULDBLOCK) {
      char buf[256] = {};
      const ssize_t n = ::pread(lock.fd_, buf, sizeof buf - 1, 0);
      if (n > 0) holder.assign(buf, static_cast<std::size_t>(n));
      while (!holder.empty() && std::isspace(static_cast<unsigned char>(holder.back())))
        holder.pop_back();
    }
    const std::string path = lock.path_;
    ::close(lock.fd_);
    lock.fd_ = -1;
    DISTOP_CHECK(error != EWOULDBLOCK, op, dir, " is in use by another run (",
                 holder.empty() ? std::string("a process") : holder, " holds ", path,
                 "); give each run its own directory");
    throw Error(op, detail::concat("cannot lock ", path, ": ", std::strerror(error)));
  }
  // Who holds it, for the message of a second run.
  char host[128] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string who = std::string(host) + " process " + std::to_string(::getpid()) + "\n";
  if (::ftruncate(lock.fd_, 0) == 0) {
    [[maybe_unused]] const ssize_t put = ::pwrite(lock.fd_, who.data(), who.size(), 0);
  }
  return lock;
}

DirectoryLock::DirectoryLock(DirectoryLock&& other) noexcept
    : fd_(other.fd_), path_(std::move(other.path_)) {
  other.fd_ = -1;
  other.path_.clear();
}

DirectoryLock& DirectoryLock::operator=(DirectoryLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
    other.path_.clear();
  }
  return *this;
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock; the file stays, harmless
}

std::size_t remove_stale_temporaries(const std::string& dir) {
  std::size_t removed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (!entry.is_regular_file(ec)) continue;
    const std::string name = entry.path().filename().string();
    const auto at = name.rfind(".tmp.");
    if (at == std::string::npos || at == 0 || at + 5 == name.size()) continue;
    bool digits = true;
    for (std::size_t i = at + 5; i < name.size(); ++i)
      digits = digits && std::isdigit(static_cast<unsigned char>(name[i]));
    if (!digits) continue;
    std::error_code rm;
    if (std::filesystem::remove(entry.path(), rm)) ++removed;
  }
  return removed;
}

}  // namespace distop::io
