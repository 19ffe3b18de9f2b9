// Writing an operator of your own and checking its adjoint with distop::testing.
//
// CyclicShift moves every rank's box to the next rank of a 1-D partition (the last rank's box goes
// to the first). It is a permutation of the components of the space, so its adjoint is the
// inverse permutation: the shift in the other direction. The dot-product test confirms it; swap
// the two directions in adjoint() and the test fails.
//
//   mpiexec -n 4 build/examples/custom_operator/custom_operator
#include <cstdio>
#include <distop/distop.hpp>

namespace {

using namespace distop;

class CyclicShift final : public LinearOperator<double> {
 public:
  // The space must give every rank a box of the same shape: a tensor replicated over a 1-D grid.
  explicit CyclicShift(TensorSpace space) : space_(std::move(space)) {
    DISTOP_CHECK(space_.partition().dim() == 1 && space_.decomposition().replicates(0),
                 "CyclicShift", "expected a tensor replicated over a 1-D partition, found ",
                 space_.str());
  }
  const TensorSpace& domain() const override { return space_; }
  const TensorSpace& range() const override { return space_; }
  std::string name() const override { return "CyclicShift"; }

  // y_{r+1} = x_r
  void forward(const DistTensor<double>& x, DistTensor<double>& y) const override {
    check_forward_args(x, y);
    shift(x, y, +1);
  }
  // x_r = y_{r+1}: the reverse transfer.
  void adjoint(const DistTensor<double>& y, DistTensor<double>& x) const override {
    check_adjoint_args(y, x);
    shift(y, x, -1);
  }

 private:
  void shift(const DistTensor<double>& in, DistTensor<double>& out, int by) const {
    const auto& p = space_.partition();
    if (!p.active()) return;
    const int n = p.size(), r = p.index();
    // comm::Exchange rather than MPI_Sendrecv on the tensors' data: where Kokkos keeps tensors in
    // GPU memory it stages them through the host, which MPI can always read.
    comm::Exchange<double> exchange(p.comm(), /*tag=*/0);
    exchange.recv(out.data(), out.local_numel(), (r - by + n) % n);
    exchange.send(in.data(), in.local_numel(), (r + by + n) % n);
    exchange.wait();
  }
  TensorSpace space_;
};

}  // namespace

int main(int argc, char** argv) {
  Environment env(argc, argv);
  int n = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // A [3, 4] tensor whose copies sit on every rank of a 1-D grid (the grid axis splits nothing).
  Shape grid{n};
  TensorSpace space(Partition::world(grid), Decomposition::balanced(Shape{3, 4}, grid, {-1, -1}));
  CyclicShift shift(space);
  auto report = testing::adjoint_test(shift);
  if (rank == 0)
    std::printf("CyclicShift on %d ranks: %s\n", n, report.str().c_str());
  return report.passed ? 0 : 1;
}
