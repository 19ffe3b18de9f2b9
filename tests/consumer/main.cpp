// A program a user writes against the installed package: an operator's adjoint test, then a model
// of its own (a Module) trained with distop's training driver, its flags and checkpoints. Run
// under mpiexec; exits non-zero on failure.
#include <distop/distop.hpp>

#include <cstdio>

// [model]
// A data-parallel MLP of local layers: every rank holds the whole model and its share of the batch.
class Mlp : public distop::nn::Module<float> {
 public:
  explicit Mlp(std::uint64_t seed)
      : net_(register_module("net", std::make_shared<distop::nn::Sequential<float>>())) {
    using distop::nn::Linear, distop::nn::LinearOptions;
    net_->add(std::make_shared<Linear<float>>(784, 64, LinearOptions{.seed = seed}))
        .add(distop::nn::relu<float>)
        .add(std::make_shared<Linear<float>>(64, 10, LinearOptions{.seed = seed + 1}));
  }
  // [batch, 784] with the batch split over every rank.
  distop::TensorSpace input_space(std::int64_t batch) const {
    auto ranks = distop::Partition::world(distop::Shape{size(), 1});
    return distop::TensorSpace(
        ranks, distop::Decomposition::balanced(distop::Shape{batch, 784}, ranks.shape(), {0, -1}));
  }
  distop::Var<float> forward(distop::Tape& tape, const distop::Var<float>& x) {
    return net_->forward(tape, x);
  }
  std::string describe() const { return "  784 -> 64 -> 10, the batch split over the ranks\n"; }

 private:
  static int size() {
    int n = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
  }
  std::shared_ptr<distop::nn::Sequential<float>> net_;
};
// [model]

namespace {

// This rank's rows of the batch, as train::fit asks.
void load_rows(const distop::data::Dataset& d, const std::vector<std::int64_t>& order,
               const distop::data::BatchRange& range, const distop::TensorSpace& space,
               distop::DistTensor<float>& x) {
  const auto& local = space.local_shape();
  std::vector<float> v;
  for (std::int64_t i = 0; i < local[0]; ++i) {
    const float* img = d.image(order[static_cast<std::size_t>(range.begin + space.local_offset()[0] + i)]);
    v.insert(v.end(), img, img + local[1]);
  }
  x.local().copy_from(distop::Tensor<float>::from_vector(local, v));
}

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
    return distop::train::fit("consumer", model, o, train_set, test_set, load_rows);
  });
  // [main]
}
