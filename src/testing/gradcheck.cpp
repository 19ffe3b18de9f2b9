#include "distop/testing/gradcheck.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>
#include <utility>

#include "distop/autodiff/apply.hpp"
#include "distop/comm/mpi.hpp"
#include "distop/core/random.hpp"
#include "distop/kernels/reduce.hpp"
#include "distop/testing/adjoint_test.hpp"

namespace distop::testing {

namespace {

constexpr const char* kOp = "gradcheck";

// Whether two communicators hold the same ranks in the same order.
bool congruent(MPI_Comm a, MPI_Comm b) {
  int same = MPI_UNEQUAL;
  DISTOP_MPI_CHECK(MPI_Comm_compare(a, b, &same), kOp);
  return same == MPI_IDENT || same == MPI_CONGRUENT;
}

// The output weights: random_tensor's values u in [-1, 1) moved to sign(u) (0.5 + |u| / 2).
DistTensor<double> weights(const TensorSpace& space, std::uint64_t seed) {
  DistTensor<double> r = random_tensor<double>(space, seed);
  std::vector<double> v = r.local().to_vector();
  for (double& w : v) w = w < 0 ? w / 2 - 0.5 : w / 2 + 0.5;
  r.local().copy_from(Tensor<double>::from_vector(r.local().shape(), v));
  return r;
}

// The entries of a box of n entries to check: all, or a seeded random subset of `most` (sorted).
std::vector<std::int64_t> entries_to_check(std::int64_t n, std::int64_t most,
                                           std::uint64_t stream) {
  std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
  std::iota(idx.begin(), idx.end(), std::int64_t{0});
  if (most <= 0 || n <= most) return idx;
  for (std::int64_t j = 0; j < most; ++j) {  // a partial Fisher-Yates shuffle
    const auto pick =
        j + static_cast<std::int64_t>(random::bits(stream, static_cast<std::uint64_t>(j)) %
                                      static_cast<std::uint64_t>(n - j));
    std::swap(idx[static_cast<std::size_t>(j)], idx[static_cast<std::size_t>(pick)]);
  }
  idx.resize(static_cast<std::size_t>(most));
  std::sort(idx.begin(), idx.end());
  return idx;
}

// Entry i of a tensor (in its memory space), read and written one at a time.
double entry(const Tensor<double>& t, std::int64_t i) {
  double v = 0;
  Kokkos::deep_copy(v, Kokkos::subview(t.view(), i));
  return v;
}
void set_entry(const Tensor<double>& t, std::int64_t i, double v) {
  Kokkos::deep_copy(Kokkos::subview(t.view(), i), v);
}

// Puts an entry back as it was, also when f throws.
class Restore {
 public:
  Restore(const Tensor<double>& t, std::int64_t i) : t_(t), i_(i), v_(entry(t, i)) {}
  ~Restore() {
    try {
      set_entry(t_, i_, v_);
    } catch (...) {  // a destructor does not throw
    }
  }
  Restore(const Restore&) = delete;
  Restore& operator=(const Restore&) = delete;
  double value() const noexcept { return v_; }

 private:
  const Tensor<double>& t_;
  std::int64_t i_;
  double v_;
};

}  // namespace

std::string GradcheckReport::str() const {
  std::ostringstream os;
  os.precision(6);
  os << (passed ? "PASS" : "FAIL") << ": max relative error " << max_relative_error
     << " (tolerance " << tolerance << "), max absolute error " << max_abs_error << " over "
     << checked << " entries";
  if (checked > 0) {
    os.precision(17);
    os << "; worst: input " << worst_input << ", rank " << worst_rank << ", entry " << worst_index
       << ": tape " << worst_tape << ", finite difference " << worst_numeric;
  }
  return os.str();
}

GradcheckReport gradcheck(const std::function<Var<double>(Tape&)>& f,
                          const std::vector<Var<double>>& inputs, const GradcheckOptions& options) {
  DISTOP_CHECK(!inputs.empty(), kOp, "no inputs to check");
  for (std::size_t k = 0; k < inputs.size(); ++k)
    DISTOP_CHECK(inputs[k].defined() && inputs[k].requires_grad(), kOp, "input ", k,
                 " is undefined or requires no gradient");
  DISTOP_CHECK(options.step > 0 && std::isfinite(options.step) && options.tolerance >= 0 &&
                   options.max_entries >= 0,
               kOp, "expected step > 0, tolerance >= 0 and max_entries >= 0, found step ",
               options.step, ", tolerance ", options.tolerance, " and max_entries ",
               options.max_entries);
  const MPI_Comm comm = inputs[0].space().partition().parent();
  for (std::size_t k = 1; k < inputs.size(); ++k)
    DISTOP_CHECK(congruent(comm, inputs[k].space().partition().parent()), kOp, "input ", k,
                 " lives on other parent ranks than input 0");
  int rank = 0, size = 1;
  DISTOP_MPI_CHECK(MPI_Comm_rank(comm, &rank), kOp);
  DISTOP_MPI_CHECK(MPI_Comm_size(comm, &size), kOp);
  const std::size_t K = inputs.size();
  for (const auto& x : inputs) x.zero_grad();

  // The tape's gradient of J = <r, y>.
  DistTensor<double> r;
  std::vector<std::vector<double>> tape_grads(K);
  {
    Tape tape;
    Var<double> y = f(tape);
    DISTOP_CHECK(y.defined(), kOp, "f returned an undefined Var");
    DISTOP_CHECK(congruent(comm, y.space().partition().parent()), kOp,
                 "f's output lives on other parent ranks than input 0");
    r = weights(y.space(), options.seed);
    backward(tape, y, r);
    for (std::size_t k = 0; k < K; ++k) {
      const Var<double>& x = inputs[k];
      tape_grads[k] = x.has_grad() ? x.grad().local().to_vector()
                                   : std::vector<double>(
                                         static_cast<std::size_t>(x.value().local_numel()), 0.0);
      x.zero_grad();
    }
  }

  // The entries each rank checks, and how many every rank checks (so that all run f alike).
  std::vector<std::vector<std::int64_t>> mine(K);
  std::vector<std::int64_t> counts(K * static_cast<std::size_t>(size));
  {
    std::vector<std::int64_t> own(K);
    for (std::size_t k = 0; k < K; ++k) {
      const std::uint64_t stream =
          random::mix(options.seed ^ random::mix(static_cast<std::uint64_t>(rank) + 1) ^
                      random::mix(static_cast<std::uint64_t>(k) + 0x5851f42d4c957f2dULL));
      mine[k] = entries_to_check(inputs[k].value().local_numel(), options.max_entries, stream);
      own[k] = static_cast<std::int64_t>(mine[k].size());
    }
    DISTOP_MPI_CHECK(MPI_Allgather(own.data(), static_cast<int>(K), MPI_INT64_T, counts.data(),
                                   static_cast<int>(K), MPI_INT64_T, comm),
                     kOp);
  }
  const auto count = [&](int q, std::size_t k) {
    return counts[static_cast<std::size_t>(q) * K + k];
  };

  // Every rank runs f for every perturbed entry of every rank; this rank's part of each J is
  // kept, and all of them are summed over the ranks at once at the end.
  const auto local_j = [&] {
    Tape tape;
    const Var<double> out = f(tape);
    tape.clear();
    check_space(out.value(), r.space(), kOp, "f's output");
    return kernels::dot(r.local(), out.value().local());
  };
  std::vector<double> j;      // J(x + h e), J(x - h e) for each perturbed entry in turn
  std::vector<double> steps;  // this rank's (x + h) - (x - h), as stored
  for (std::size_t k = 0; k < K; ++k) {
    const Tensor<double>& value = inputs[k].value().local();
    for (int q = 0; q < size; ++q)
      for (std::int64_t e = 0; e < count(q, k); ++e) {
        if (q != rank) {
          j.push_back(local_j());
          j.push_back(local_j());
          continue;
        }
        const std::int64_t i = mine[k][static_cast<std::size_t>(e)];
        const Restore restore(value, i);
        const double up = restore.value() + options.step;
        const double down = restore.value() - options.step;
        set_entry(value, i, up);
        j.push_back(local_j());
        set_entry(value, i, down);
        j.push_back(local_j());
        steps.push_back(up - down);
      }
  }
  if (!j.empty())
    DISTOP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, j.data(), static_cast<int>(j.size()), MPI_DOUBLE,
                                   MPI_SUM, comm),
                     kOp);

  // This rank's entries against the tape: {max abs, max relative, input, index, tape, numeric,
  // checked}, worst by relative error (NaN counts as infinite).
  std::array<double, 7> local{0, 0, 0, 0, 0, 0, 0};
  {
    std::size_t at = 0, step = 0;
    for (std::size_t k = 0; k < K; ++k)
      for (int q = 0; q < size; ++q)
        for (std::int64_t e = 0; e < count(q, k); ++e, at += 2) {
          if (q != rank) continue;
          const std::int64_t i = mine[k][static_cast<std::size_t>(e)];
          const double numeric = (j[at] - j[at + 1]) / steps[step++];
          const double tape = tape_grads[k][static_cast<std::size_t>(i)];
          double abs_error = std::abs(tape - numeric);
          double rel_error = abs_error / std::max(1.0, std::abs(numeric));
          if (std::isnan(rel_error))
            abs_error = rel_error = std::numeric_limits<double>::infinity();
          local[0] = std::max(local[0], abs_error);
          if (rel_error > local[1] || local[6] == 0) {
            local[1] = rel_error;
            local[2] = static_cast<double>(k);
            local[3] = static_cast<double>(i);
            local[4] = tape;
            local[5] = numeric;
          }
          local[6] += 1;
        }
  }
  std::vector<double> all(7 * static_cast<std::size_t>(size));
  DISTOP_MPI_CHECK(MPI_Allgather(local.data(), 7, MPI_DOUBLE, all.data(), 7, MPI_DOUBLE, comm),
                   kOp);

  GradcheckReport report;
  report.tolerance = options.tolerance;
  bool any = false;
  for (int q = 0; q < size; ++q) {
    const double* v = all.data() + 7 * static_cast<std::size_t>(q);
    if (v[6] == 0) continue;
    report.max_abs_error = std::max(report.max_abs_error, v[0]);
    report.checked += static_cast<std::int64_t>(v[6]);
    if (!any || v[1] > report.max_relative_error) {
      report.max_relative_error = v[1];
      report.worst_input = static_cast<std::size_t>(v[2]);
      report.worst_rank = q;
      report.worst_index = static_cast<std::int64_t>(v[3]);
      report.worst_tape = v[4];
      report.worst_numeric = v[5];
    }
    any = true;
  }
  report.passed = report.max_relative_error <= options.tolerance;
  return report;
}

}  // namespace distop::testing
