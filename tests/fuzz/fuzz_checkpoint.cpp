// libFuzzer target: load_checkpoint on arbitrary bytes as a checkpoint file, into a small model
// with an SGD and an Adam optimizer (fuzz_model.hpp), at one MPI rank. A malformed or foreign
// checkpoint must give distop::Error, never a crash, an out-of-bounds access or undefined
// arithmetic (the metadata's integers and floating options are parsed from strings).
#include <cstdint>
#include <string>

#include "distop/core/environment.hpp"
#include "distop/core/error.hpp"
#include "fuzz_input.hpp"
#include "fuzz_model.hpp"

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  new distop::Environment(*argc, *argv);  // MPI (a singleton rank) and Kokkos; never finalized
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // The scratch directory is the checkpoint directory: the input is its checkpoint.safetensors.
  distop::fuzz::write_input(data, size, "checkpoint.safetensors");
  const std::string dir = distop::fuzz::scratch().str();
  distop::fuzz::CheckpointModel model;
  try {
    (void)distop::io::load_checkpoint(dir, model.net, model.optimizer);
  } catch (const distop::Error&) {
  }
  try {
    (void)distop::io::load_checkpoint(dir, model.net, model.adam);
  } catch (const distop::Error&) {
  }
  return 0;
}
