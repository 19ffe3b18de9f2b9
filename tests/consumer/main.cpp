// A program a user writes against the installed package: an operator's adjoint test, then a model
// of its own (a Module) trained with distop's training driver, its flags and checkpoints. Run
// under mpiexec; exits non-zero on failure.
#include <cstdio>
#include <distop/distop.hpp>
#include <distop/train/cli.hpp>

// [model]
// A model-parallel MLP: fc1's weight is split by columns over every rank (each rank holds a block
// of the input features and of fc1's weight), fc2 runs on rank 0, where the logits end.
class Mlp : public distop::nn::Module<float> {
 public:
  explicit Mlp(std::uint64_t seed)
      : fc1_(register_module("fc1", std::make_shared<distop::nn::DistributedLinear<float>>(
                                        784, 64, distop::Partition::world(distop::Shape{1, size()}),
                                        distop::nn::LinearOptions{.seed = seed}))),
        fc2_(register_module("fc2", std::make_shared<distop::nn::DistributedLinear<float>>(
                                        64, 10, distop::Partition::world(distop::Shape{1, 1}),
                                        distop::nn::LinearOptions{.seed = seed + 1}))) {}
  // [batch, 784], the features split over the ranks.
  distop::TensorSpace input_space(std::int64_t batch) const { return fc1_->input_space(batch); }
  distop::Var<float> forward(distop::Tape& tape, const distop::Var<float>& x) {
    return fc2_->forward(tape, distop::nn::relu(tape, fc1_->forward(tape, x)));
  }
  std::string describe() const { return "  784 -> 64 (split by columns) -> 10\n"; }

 private:
  static int size() {
    int n = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
  }
  std::shared_ptr<distop::nn::DistributedLinear<float>> fc1_, fc2_;
};
// [model]

namespace {

int adjoint_check() {
  int n = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  distop::TensorSpace src(distop::Shape{16}, distop::Partition::world(distop::Shape{1}));
  distop::Broadcast<double> b(src, distop::Partition::world(distop::Shape{n}));
  auto report = distop::testing::adjoint_test(b);
  if (rank == 0) std::printf("consumer: %s\n", report.str().c_str());
  return report.passed ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  // [main]
  distop::train::TrainOptions o;
  CLI::App app{"A user's own model trained with distop's driver"};
  distop::train::add_training_options(app, o);
  return distop::train::run_main(argc, argv, app, "consumer", [&] {
    if (adjoint_check() != 0) return 1;
    auto train_set = distop::data::load_mnist_like_collective(MPI_COMM_WORLD, o.data, true);
    auto test_set = distop::data::load_mnist_like_collective(MPI_COMM_WORLD, o.data, false);
    Mlp model(o.seed);
    distop::train::CrossEntropyLoss<float> loss;  // of the logits against the labels
    return distop::train::fit(model, loss, train_set, &test_set, o, {.program = "consumer"});
  });
  // [main]
}
