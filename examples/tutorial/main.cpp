// docs/tutorial.md as one program: a small spatially partitioned CNN (conv 1 -> 8, 3x3, over a
// 2 x 2 grid of ranks; 2x2 max pool; a Repartition onto the classifier's ranks; a 1568 -> 10
// linear layer on a [1, 2] weight grid), trained for a few steps on one fixed batch of synthetic
// images: class k is a bright 5 x 5 square at its own place, on noise. The loss must fall to under
// half its first value (the batch is learnt), else the program exits with 1.
//
//   mpiexec -n 4 build/examples/tutorial/tutorial [--steps N]
#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <distop/distop.hpp>
#include <memory>
#include <vector>

using namespace distop;

namespace {

constexpr std::int64_t kBatch = 32;
constexpr std::int64_t kSide = 28;

// Pixel (r, c) of example n: noise in [0, 0.3), plus 1 inside the square of class n % 10 (rows
// 3 + 8 (k / 4), columns 3 + 6 (k % 4), 5 x 5).
float pixel(std::int64_t n, std::int64_t r, std::int64_t c) {
  const std::int64_t k = n % 10, top = 3 + 8 * (k / 4), left = 3 + 6 * (k % 4);
  const bool inside = r >= top && r < top + 5 && c >= left && c < left + 5;
  const auto index = static_cast<std::uint64_t>((n * kSide + r) * kSide + c);
  return static_cast<float>(0.3 * random::uniform(7, index) + (inside ? 1.0 : 0.0));
}

int run(int steps) {
  const std::int64_t batch = kBatch;

  // 1. The partitions.
  auto spatial = Partition::world(Shape{1, 1, 2, 2});  // ranks 0..3 as a 2 x 2 grid

  // 2. The layers.
  nn::DistributedConv<float> conv(2, 1, 8, 3, spatial, {.padding = 1, .seed = 1});
  nn::DistributedPool<float> pool(nn::PoolKind::max, 2, {2});  // 2x2 max pool, stride 2
  auto fc_grid = Partition::world(Shape{1, 2}, {0, 1});
  nn::DistributedLinear<float> fc(8 * 14 * 14, 10, fc_grid, {.seed = 2});

  // 3. The transition: the pooled maps split by channel over fc's input ranks.
  auto by_channel = fc.input_partition().reshape(Shape{1, 2, 1, 1});
  auto to_fc = std::make_shared<const Repartition<float>>(
      pool.output_space(conv.output_space(batch, Shape{28, 28})),
      TensorSpace(Shape{batch, 8, 14, 14}, by_channel));

  // 4. The data: this rank's quarter of each image, and the labels on the rank holding the
  // logits.
  optim::SGD<float> opt({conv.weight(), conv.bias(), fc.weight(), fc.bias()}, {0.02, 0.9});
  DistTensor<float> x(conv.input_space(batch, Shape{28, 28}));
  std::vector<float> pixels;
  for (const std::int64_t g : x.space().global_indices())  // [batch, 1, 28, 28], row-major
    pixels.push_back(pixel(g / (kSide * kSide), (g / kSide) % kSide, g % kSide));
  x.local().copy_from(Tensor<float>::from_vector(x.space().local_shape(), pixels));
  const bool holds_logits = fc.output_space(batch).local_shape().numel() > 0;
  std::vector<std::int32_t> labels;
  if (holds_logits)
    for (std::int64_t n = 0; n < batch; ++n) labels.push_back(static_cast<std::int32_t>(n % 10));

  double first = 0, last = 0;
  for (int step = 1; step <= steps; ++step) {
    Tape tape;
    auto h = pool.forward(tape, nn::relu(tape, conv.forward(tape, Var<float>(x))));
    h = nn::flatten(tape, apply<float>(tape, to_fc, h), fc.input_space(batch));
    auto logits = fc.forward(tape, h);                      // [batch, 10] on rank 0
    auto loss = loss::cross_entropy(tape, logits, labels);  // labels on rank 0, empty elsewhere
    backward(tape, loss);                                   // adjoints in reverse order
    opt.step();
    opt.zero_grad();
    if (holds_logits) {
      last = loss.value().local().to_vector()[0];
      if (step == 1) first = last;
      if (step == 1 || step % 10 == 0 || step == steps)
        std::printf("step %3d  loss %.4f\n", step, last);
    }
  }
  // The verdict of the rank holding the logits, on every rank.
  int learnt = holds_logits && last < 0.5 * first ? 1 : 0;
  DISTOP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &learnt, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD),
                   "tutorial");
  if (holds_logits)
    std::printf("loss %.4f -> %.4f: %s\n", first, last,
                learnt ? "the batch is learnt" : "FAILED to fall below half");
  return learnt ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Environment env(argc, argv);  // MPI + Kokkos
  int steps = 30;
  CLI::App app{"docs/tutorial.md's CNN on a 2 x 2 grid of ranks (run it at 4 ranks)"};
  app.add_option("--steps", steps, "training steps on the fixed batch")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return rank == 0 ? app.exit(e) : e.get_exit_code();
  }
  if (size != 4) {
    if (rank == 0)
      std::fprintf(stderr, "tutorial: runs at 4 ranks (a 2 x 2 grid), found %d: mpiexec -n 4\n",
                   size);
    return 2;
  }
  try {
    return run(steps);
  } catch (const std::exception& e) {
    return env.report_error(e, "tutorial");  // rank 0 prints an error every rank raised
  }
}
