#pragma once
// Internal to the data layer: finding and opening a data set's files, with one verdict for every
// loader (IDX and CIFAR-10 alike): a file that is not there "does not exist"; one that is there
// but cannot be read says why, in the OS's words (strerror: "Permission denied", "Too many levels
// of symbolic links"); a directory where a file is expected says so.

#include <string>

namespace distop::data::detail {

// Whether `path` names something: false when it does not (ENOENT, or ENOTDIR: a part of it is a
// file). Throws distop::Error (op `op`) "cannot read <path>: <reason>" when the OS cannot tell (a
// directory on the way that may not be searched, a loop of symbolic links).
bool exists(const char* op, const std::string& path);

// Opens `path` for reading and returns its file descriptor (the caller owns it). Throws
// distop::Error (op `op`): "file <path> does not exist", "file <path> is a directory, expected
// <what>" ("an IDX file"), or "cannot read file <path>: <reason>".
int open_for_reading(const char* op, const std::string& path, const char* what);

}  // namespace distop::data::detail
