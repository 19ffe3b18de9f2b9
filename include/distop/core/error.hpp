#pragma once
// distop::Error and the checks that raise it.

#include <sstream>
#include <stdexcept>
#include <string>

namespace distop {

// The error every distop check raises. It names the operation that failed, the rank that raised it
// (the rank in MPI_COMM_WORLD, or -1 before MPI is initialised) and what was expected against what
// was found. Checks whose outcome could differ between ranks are agreed on collectively before they
// throw, so that every rank raises the same Error.
class Error : public std::runtime_error {
 public:
  Error(std::string op, const std::string& message);

  const std::string& op() const noexcept { return op_; }
  int rank() const noexcept { return rank_; }
  // The message without the "[op, rank r]" prefix.
  const std::string& detail() const noexcept { return detail_; }

 private:
  std::string op_;
  std::string detail_;
  int rank_;
};

// The rank in MPI_COMM_WORLD, or -1 when MPI is not initialised (or already finalised).
int world_rank() noexcept;

namespace detail {
template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace distop

// Throws distop::Error(op, message...) unless cond holds. The message parts are streamed.
#define DISTOP_CHECK(cond, op, ...)                                  \
  do {                                                               \
    if (!(cond)) throw ::distop::Error((op), ::distop::detail::concat(__VA_ARGS__)); \
  } while (0)
