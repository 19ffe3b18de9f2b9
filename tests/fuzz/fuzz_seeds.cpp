// Writes the fuzz targets' seed inputs with distop's own writers: DIR/safetensors/ (tensors of
// every element type, empty and scalar shapes, metadata), DIR/idx/ (plain and gzip-compressed, one
// to four axes) and DIR/checkpoint/ (fuzz_model.hpp's model saved with its SGD optimizer before and
// after a step, so with and without momentum buffers, and with its Adam optimizer and a
// scheduler's state after a step); and DIR/cifar/ with the tests' writer (distop writes no CIFAR-10
// files, tests/support/cifar_files.hpp): batch files of one record and of three (labels 1, 5, 9).
// Usage: fuzz_seeds DIR
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "cifar_files.hpp"
#include "distop/core/environment.hpp"
#include "distop/data/idx.hpp"
#include "distop/io/checkpoint.hpp"
#include "distop/io/safetensors.hpp"
#include "fuzz_model.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  distop::Environment env(argc, argv);  // save_checkpoint is collective (here over one rank)
  namespace fs = std::filesystem;
  using distop::Shape;
  using distop::io::TensorEntry;
  try {
    const fs::path dir = argv[1];
    fs::create_directories(dir / "safetensors");
    fs::create_directories(dir / "idx");

    const std::vector<float> f{1.5f, -2.0f, 0.25f, 3.0f, 4.0f, 5.0f};
    const std::vector<double> d{1.0, 2.0, 3.0};
    const std::vector<std::int32_t> i32{1, -2, 3, 4};
    const std::vector<std::int64_t> i64{7};
    const std::vector<std::uint8_t> u8{1, 2, 3, 4};
    const std::string st = (dir / "safetensors").string();
    distop::io::write_safetensors(
        st + "/mixed.safetensors",
        {TensorEntry("w", Shape{2, 3}, f.data()), TensorEntry("b", Shape{3}, d.data()),
         TensorEntry("i", Shape{2, 2}, i32.data()), TensorEntry("step", Shape{}, i64.data()),
         TensorEntry("mask", Shape{4}, u8.data())},
        {{"format", "pt"}, {"epoch", "3"}});
    distop::io::write_safetensors(
        st + "/f32.safetensors",
        {TensorEntry("x", Shape{6}, f.data()), TensorEntry("empty", Shape{0, 4}, f.data())});
    distop::io::write_safetensors(st + "/none.safetensors", {});

    const std::string idx = (dir / "idx").string();
    using distop::data::IdxArray;
    distop::data::write_idx(idx + "/images",
                            IdxArray{{2, 2, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}}, false);
    distop::data::write_idx(idx + "/images.gz", IdxArray{{3, 2}, {9, 8, 7, 6, 5, 4}}, true);
    distop::data::write_idx(idx + "/labels", IdxArray{{5}, {0, 1, 2, 3, 4}}, false);
    distop::data::write_idx(idx + "/four.gz", IdxArray{{1, 2, 1, 2}, {1, 2, 3, 4}}, true);
    distop::data::write_idx(idx + "/empty", IdxArray{{0}, {}}, false);

    const fs::path cifar = dir / "cifar";
    fs::create_directories(cifar);
    distop::test::write_bytes(cifar / "one.bin", distop::test::cifar10_records(1, 1));
    auto three = distop::test::cifar10_records(3, 2);
    for (std::uint8_t r = 0; r < 3; ++r) three[r * 3073] = static_cast<std::uint8_t>(4 * r + 1);
    distop::test::write_bytes(cifar / "three.bin", three);

    // Saved to a directory of its own, then moved into the corpus under a name of its own.
    const fs::path ck = dir / "checkpoint";
    const fs::path work = dir / "checkpoint.work";
    fs::create_directories(ck);
    distop::fuzz::CheckpointModel model;
    distop::io::save_checkpoint(work.string(), model.net, model.optimizer,
                                {.epoch = 2, .step_in_epoch = 5, .global_step = 17, .seed = 42});
    fs::rename(distop::io::checkpoint_path(work.string()), ck / "fresh");
    model.step();
    distop::io::save_checkpoint(work.string(), model.net, model.optimizer,
                                {.epoch = 0,
                                 .step_in_epoch = 1,
                                 .global_step = 1,
                                 .seed = 18446744073709551615ull,
                                 .metadata = {{"run", "fuzz"}}});
    fs::rename(distop::io::checkpoint_path(work.string()), ck / "stepped");
    distop::io::save_checkpoint(work.string(), model.net, model.adam,
                                {.epoch = 0,
                                 .step_in_epoch = 1,
                                 .global_step = 1,
                                 .seed = 7,
                                 .scheduler = distop::optim::LRSchedulerState{1, {1e-3, 1e-2}}});
    fs::rename(distop::io::checkpoint_path(work.string()), ck / "adam");
    fs::remove_all(work);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
