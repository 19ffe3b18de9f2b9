// Each of distop's data-movement operators on a small tensor: who holds what before and after
// forward, and after the adjoint applied to the forward's result. Entries start as their global
// index, so you can follow every value.
//
//   mpiexec -n 4 build/examples/primitives/primitives
#include <cstdio>
#include <distop/distop.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace distop;

// Prints one line per rank, in rank order, from rank 0.
void print_ranks(const std::string& mine) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(static_cast<std::size_t>(size)), offsets(static_cast<std::size_t>(size));
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  int total = 0;
  for (int r = 0; r < size; ++r) {
    offsets[r] = total;
    total += lengths[r];
  }
  std::string all(static_cast<std::size_t>(total), ' ');
  MPI_Gatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR,
              0, MPI_COMM_WORLD);
  if (rank == 0)
    for (int r = 0; r < size; ++r)
      std::printf(
          "    rank %d: %s\n", r,
          all.substr(static_cast<std::size_t>(offsets[r]), static_cast<std::size_t>(lengths[r]))
              .c_str());
}

std::string show(const DistTensor<double>& t) {
  if (!t.space().partition().active()) return "-";
  std::ostringstream os;
  os << t.space().local_shape().str() << " {";
  auto v = t.local().to_vector();
  for (std::size_t i = 0; i < v.size(); ++i) os << (i ? " " : "") << v[i];
  os << "}";
  return os.str();
}

void say(const std::string& s) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) std::printf("%s\n", s.c_str());
}

DistTensor<double> iota(const TensorSpace& s) {
  DistTensor<double> x(s);
  const auto idx = s.global_indices();
  std::vector<double> v(idx.begin(), idx.end());
  x.local().copy_from(Tensor<double>::from_vector(s.local_shape(), v));
  return x;
}

void demo(const LinearOperator<double>& op, const std::string& what) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) std::printf("\n%s: %s\n", op.name().c_str(), what.c_str());
  auto x = iota(op.domain());
  say("  x:");
  print_ranks(show(x));
  auto y = op.apply(x);
  say("  forward, y = F x:");
  print_ranks(show(y));
  auto z = op.apply_adjoint(y);
  say("  adjoint, F* y:");
  print_ranks(show(z));
}

}  // namespace

int run() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const auto everyone = Partition::world(Shape{n});
  const TensorSpace on_rank0(Shape{4}, Partition::world(Shape{1}, {0}));
  const TensorSpace split(Shape{2 * n}, everyone);

  demo(Broadcast<double>(on_rank0, everyone), "rank 0's tensor copied to every rank");
  demo(SumReduce<double>(everyone, on_rank0), "every rank's copy summed onto rank 0");
  const TensorSpace copies(everyone, Decomposition::balanced(Shape{3}, Shape{n}, {-1}));
  demo(AllSumReduce<double>(copies, {0}), "every rank's copy replaced by the sum of all copies");
  demo(Gather<double>(split, 0), "the blocks assembled on rank 0");
  demo(Scatter<double>(split, 0), "rank 0's tensor cut into blocks");
  demo(AllGather<double>(split, {0}), "every rank receives every block");
  demo(ReduceScatter<double>(split, {0}), "each block's owner receives the sum of its copies");
  const TensorSpace rows(Shape{n, 2}, Partition::world(Shape{n, 1}));
  const TensorSpace cols(Shape{n, 2}, Partition::world(Shape{1, n > 1 ? 2 : 1}));
  demo(Repartition<double>(rows, cols), "an [n, 2] tensor split by rows, then by columns");
  // A 3-wide convolution (padding 1) over a 1-D tensor split over every rank: each rank's box
  // grows one ghost on each side; forward fills them from the neighbours, the adjoint adds them
  // back into the neighbours and zeroes them.
  const TensorSpace line(Shape{3 * n}, everyone);
  demo(HaloExchange<double>(line, std::vector<ConvWindow>{{3, 1, 1, 1}}),
       "ghost zones of a 3-wide window, filled from the neighbours");
  demo(SendRecv<double>(on_rank0, Partition::world(Shape{1}, {n - 1})),
       "rank 0's tensor sent to the last rank");
  return 0;
}

int main(int argc, char** argv) {
  Environment env(argc, argv);
  try {
    return run();
  } catch (const std::exception& e) {
    return env.report_error(e, "primitives");
  }
}
