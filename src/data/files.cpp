#include "files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "distop/core/error.hpp"

namespace distop::data::detail {

bool exists(const char* op, const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return true;
  const int error = errno;
  if (error == ENOENT || error == ENOTDIR) return false;
  throw Error(op, distop::detail::concat("cannot read ", path, ": ", std::strerror(error)));
}

int open_for_reading(const char* op, const std::string& path, const char* what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    DISTOP_CHECK(error != ENOENT && error != ENOTDIR, op, "file ", path, " does not exist");
    throw Error(op, distop::detail::concat("cannot read file ", path, ": ", std::strerror(error)));
  }
  struct stat st {};
  const bool directory = ::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
  if (directory) ::close(fd);
  DISTOP_CHECK(!directory, op, "file ", path, " is a directory, expected ", what);
  return fd;
}

}  // namespace distop::data::detail
