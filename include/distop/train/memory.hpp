#pragma once
// What training a model takes in memory on one rank, estimated from its layers' shapes before
// anything large is allocated, and the check that it fits (train::check_training_fits), so that a
// model or batch too large for the machine is an error naming its flag and the bytes rather than a
// std::bad_alloc without context or a rank killed by the kernel.

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "distop/train/options.hpp"

namespace distop::train {

// A model's layers as far as memory goes, on one rank: for each layer, the parameters this rank
// holds and the numbers per example that its forward pass keeps for backward (its output), and
// the largest transient buffer per example (a convolution's im2col matrix). Counts are of tensor
// elements; `share` is the fraction of the layer this rank holds (1 / the ranks a partitioned
// layer is split over; 1 for a replicated one).
class ModelFootprint {
 public:
  struct Layer {
    std::string name;
    double parameters = 0;               // elements held on this rank
    double activations_per_example = 0;  // elements kept for backward, per example, this rank
    double workspace_per_example = 0;    // transient elements per example, this rank
  };

  // Any layer.
  ModelFootprint& add(Layer layer);
  // The input of `per_example` elements per example (kept: the first layer's backward reads it).
  ModelFootprint& input(double per_example, double share = 1);
  // A convolution from `in_channels` to `out_channels` with a kernel of `kernel_numel` taps per
  // channel (9 for 3 x 3), bias, and `out_positions` output positions per channel (rows x cols):
  // its weights and bias, its output, and its im2col matrix as workspace.
  ModelFootprint& conv(std::string name, std::int64_t in_channels, std::int64_t out_channels,
                       std::int64_t kernel_numel, std::int64_t out_positions, double share = 1);
  // A fully connected layer `in` -> `out` with bias: its weights and bias, and its output.
  ModelFootprint& linear(std::string name, std::int64_t in, std::int64_t out, double share = 1);
  // A layer without parameters (pooling, an activation, dropout) whose output has `per_example`
  // elements per example.
  ModelFootprint& elementwise(std::string name, double per_example, double share = 1);

  const std::vector<Layer>& layers() const noexcept { return layers_; }
  // Sums over the layers.
  double parameters() const noexcept;
  double activations_per_example() const noexcept;
  // The largest of any layer's workspace and twice its activations (a gradient of that size and
  // the next one's, alive together in backward), per example.
  double peak_transient_per_example() const noexcept;

 private:
  std::vector<Layer> layers_;
};

// Numbers of optimizer state per parameter for the optimizer the settings describe: SGD 1 with
// momentum (else 0), Adam and AdamW 2 (3 with amsgrad), RMSprop 1 (+1 with momentum, +1 centered),
// Adagrad 1.
int optimizer_states_per_parameter(const TrainOptions& o);

// The bytes training takes on this rank at `examples` examples per step, with elements of
// `element_bytes`: the parameters, their gradients and the optimizer's state (the state divided
// over `replicas` with --zero 1, the gradients too with --zero 2), the activations kept for
// backward, and the peak transient buffers. A lower bound: scratch, MPI's buffers and the data set
// come on top.
struct TrainingBytes {
  double parameters = 0;   // parameters, gradients and optimizer state
  double activations = 0;  // kept activations and peak transient buffers
  double total() const noexcept { return parameters + activations; }
};
TrainingBytes training_bytes(const ModelFootprint& model, std::int64_t examples,
                             const TrainOptions& o, int replicas, std::size_t element_bytes = 4);

// The memory that check_training_fits holds the ranks of this host against, in bytes: the host's
// physical memory (sysconf; 0 when unknown, and then nothing is checked), or
// DISTOP_HOST_MEMORY_BYTES where set (a number of bytes > 0): a batch job's share of a node, or a
// test that must see the check fail on any host. A value that is not such a number is named on
// stderr and the physical memory used.
double host_memory_bytes();

// The examples one replica holds in a step of a run over a training set of `dataset_size`
// examples: batch_size / replicas, or fewer where the set is smaller than the batch (each
// replica's sampler draws ceil(dataset_size / replicas) examples an epoch, and a step never holds
// more than that). What check_training_fits is given for one view of a step.
std::int64_t examples_per_step(const TrainOptions& o, std::int64_t dataset_size);

// Checks that training `model` (this rank's footprint) at `examples` examples per step on this
// rank (examples_per_step, or a multiple of it where a step holds several views) fits in memory:
// the ranks on each host (MPI_COMM_TYPE_SHARED) together need at most that host's physical memory.
// Otherwise throws distop::Error (op `program`) on every rank of `comm`, with the same message:
// "--batch-size 100000 needs N bytes per rank (P for the parameters, their gradients and the
// optimizer's state, A for the activations of E examples); the K ranks on host H need N' bytes,
// more than its M bytes of memory" (host_memory_bytes), naming `model_setting` ("--hidden 4096",
// "the model") instead of --batch-size when the parameters alone do not fit. Collective over `comm`
// (a split by host and two all-reduces).
void check_training_fits(const std::string& program, const ModelFootprint& model,
                         std::int64_t examples, const TrainOptions& o, int replicas,
                         const std::string& model_setting, MPI_Comm comm = MPI_COMM_WORLD);

}  // namespace distop::train
