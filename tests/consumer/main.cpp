// Broadcasts a tensor from rank 0 to every rank and checks the adjoint: exits non-zero on failure.
#include <distop/distop.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  distop::Environment env(argc, argv);
  int n = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  distop::TensorSpace src(distop::Shape{16}, distop::Partition::world(distop::Shape{1}));
  distop::Broadcast<double> b(src, distop::Partition::world(distop::Shape{n}));
  auto report = distop::testing::adjoint_test(b);
  if (rank == 0) std::printf("consumer: %s\n", report.str().c_str());
  return report.passed ? 0 : 1;
}
