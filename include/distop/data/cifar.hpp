#pragma once
// CIFAR-10 in its binary form (the "CIFAR-10 binary version", cifar-10-batches-bin): the training
// split in data_batch_1.bin .. data_batch_5.bin, the test split in test_batch.bin.
//
// Each file is a sequence of 3073-byte records, nothing else: one label byte (0-9: airplane,
// automobile, bird, cat, deer, dog, frog, horse, ship, truck), then the 32 x 32 colour image as
// 3072 bytes, channel-major: the 1024 red values row by row, then the 1024 green, then the 1024
// blue. The released files hold 10000 records each; any positive whole number is read.

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "distop/data/idx.hpp"

namespace distop::data {

inline constexpr std::int64_t kCifar10Channels = 3;
inline constexpr std::int64_t kCifar10Side = 32;  // rows and columns
inline constexpr std::int64_t kCifar10RecordBytes =
    1 + kCifar10Channels * kCifar10Side * kCifar10Side;  // 3073
inline constexpr int kCifar10Classes = 10;

// The files of a split in `dir`: dir/data_batch_1.bin .. dir/data_batch_5.bin (train) or
// dir/test_batch.bin (!train). When dir holds none of the split's files but its subdirectory
// cifar-10-batches-bin (where the released archive unpacks) holds the first, that subdirectory's.
// Throws distop::Error (op "load_cifar10") naming the first file that does not exist.
std::vector<std::string> cifar10_files(const std::string& dir, bool train);

// The records of one CIFAR-10 batch file as a data set: channels 3, rows and cols 32, images
// byte / 255 in the file's channel-major order (so each image is a [3, 32, 32] tensor, NCHW),
// labels as stored. Throws distop::Error (op "read_cifar10") naming the file when it is missing,
// a directory or unreadable, when it is empty or its size is not a whole number of 3073-byte
// records (a record cut short), or when a label is greater than 9 (naming the record).
Dataset read_cifar10_batch(const std::string& path);

// The training (train: 50000 images from the five data_batch files, in file order) or test
// (!train: 10000 from test_batch.bin) split of CIFAR-10 in `dir` (cifar10_files).
// read_cifar10_batch's errors are raised under op "load_cifar10", naming the file.
Dataset load_cifar10(const std::string& dir, bool train);

// load_cifar10 on every rank of `comm` (collective). A failure on any rank, or ranks whose loaded
// data sets differ (in shape or in content, as by a checksum), makes every rank throw the same
// distop::Error (op "load_cifar10"), with the message of the lowest failing rank; no rank is left
// waiting. With MPI_COMM_NULL it is load_cifar10.
Dataset load_cifar10_collective(MPI_Comm comm, const std::string& dir, bool train);

}  // namespace distop::data
