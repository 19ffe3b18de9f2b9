// A model-parallel MLP trained on Fashion-MNIST: every weight matrix is split over a 2-D grid of
// ranks (DistributedLinear), and the forward and backward passes move data with Broadcast and
// SumReduce only.
//
//   mpiexec -n 4 build/examples/mlp/mlp --epochs 5
//
// With the same --init file and --no-shuffle the losses agree across rank counts (1, 2, 4) to
// float rounding: the partitioning changes where the arithmetic happens, not what it computes.
#include <CLI/CLI.hpp>
#include <distop/distop.hpp>
#include <distop/train/cli.hpp>
#include <sstream>

#include "model.hpp"

namespace {

using namespace distop;

std::vector<std::int64_t> parse_sizes(const std::string& hidden, std::int64_t in,
                                      std::int64_t out) {
  std::vector<std::int64_t> sizes{in};
  std::stringstream ss(hidden);
  std::string item;
  DISTOP_CHECK(hidden.empty() || hidden.back() != ',', "mlp", "--hidden has an empty entry in '",
               hidden, "'");
  while (std::getline(ss, item, ',')) {
    DISTOP_CHECK(!item.empty(), "mlp", "--hidden has an empty entry in '", hidden, "'");
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    DISTOP_CHECK(used == item.size() && v > 0, "mlp",
                 "--hidden expects positive integers "
                 "separated by commas, found '",
                 hidden, "'");
    sizes.push_back(v);
  }
  sizes.push_back(out);
  return sizes;
}

}  // namespace

int main(int argc, char** argv) {
  train::TrainOptions o;
  std::string hidden = "256,128";
  CLI::App app{"Model-parallel MLP on Fashion-MNIST (distop example). Run under mpiexec -n N."};
  train::add_training_options(app, o);
  app.add_option("--hidden", hidden, "Hidden layer sizes, comma separated")->capture_default_str();
  return train::run_main(argc, argv, app, "mlp", [&] {
    auto train_set = data::load_mnist_like_collective(MPI_COMM_WORLD, o.data, true);
    auto test_set = data::load_mnist_like_collective(MPI_COMM_WORLD, o.data, false);
    parallel::Replicas replicas(MPI_COMM_WORLD, o.replicas);
    const auto sizes = parse_sizes(hidden, train_set.pixels(), 10);
    // The model and a batch must fit in memory (the ranks of each host together), checked before
    // anything large is allocated.
    int model_ranks = 1, model_rank = 0;
    MPI_Comm_size(replicas.model_comm(), &model_ranks);
    MPI_Comm_rank(replicas.model_comm(), &model_rank);
    train::check_training_fits(
        "mlp", examples::ModelParallelMlp::footprint(sizes, model_ranks, model_rank),
        train::examples_per_step(o, train_set.size), o, o.replicas, "--hidden " + hidden);
    examples::ModelParallelMlp model(sizes, o.seed, replicas.model_comm());
    // Each rank loads its feature block of the batch's pixels ([batch, 784], features split).
    train::CrossEntropyLoss<float> loss;
    return train::fit(model, loss, train_set, &test_set, o,
                      {.program = "mlp",
                       .replicas = &replicas,
                       .save_metadata = {{"model", "mlp"}, {"hidden", hidden}}});
  });
}
