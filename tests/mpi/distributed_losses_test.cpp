// DistDL's distributed losses (L1, MSE, PoissonNLL, BCE, BCEWithLogits, KLDiv, soft Dice) on any
// partition of input and target: each loss and reduction equals torch's definition computed here
// on the global tensors, on this rank alone and on balanced, uneven and partly idle partitions;
// the reducing forms return a loss in distop's convention (each rank's component its box's part);
// the gradients pass testing::gradcheck in double; bad arguments are the same Error on every
// rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numbers>
#include <string>
#include <vector>

#include "distop/autodiff/apply.hpp"
#include "distop/core/random.hpp"
#include "distop/loss/bce.hpp"
#include "distop/loss/dice.hpp"
#include "distop/loss/kl_div.hpp"
#include "distop/loss/l1.hpp"
#include "distop/loss/mse.hpp"
#include "distop/loss/poisson_nll.hpp"
#include "distop/loss/reduction.hpp"
#include "distop/loss/total.hpp"
#include "distop/testing/gradcheck.hpp"
#include "mpi_test_util.hpp"

using namespace distop;
using loss::Reduction;
using test::world_rank;
using test::world_size;
namespace dt = distop::testing;

namespace {

// The global tensors: [N, C, L].
constexpr std::int64_t kN = 5, kC = 3, kL = 4, kNumel = kN * kC * kL;

struct Layout {
  std::string name;
  TensorSpace space;
  bool alone = false;  // this rank alone holds the whole tensor (Partition::self)
};

// The layouts every loss is checked on, the same on every rank (made once, in the same order
// everywhere: the partitions' constructors are collective): the whole tensor on this rank alone,
// the batch axis split evenly over every rank, uneven blocks over every rank, and uneven blocks
// over every rank but rank 0, which holds nothing.
const std::vector<Layout>& layouts() {
  static const std::vector<Layout> all = [] {
    const Shape shape{kN, kC, kL};
    const int p = world_size();
    std::vector<Layout> l;
    l.push_back({"one rank", TensorSpace(shape, Partition::self({1, 1, 1})), true});
    l.push_back({"balanced", TensorSpace(shape, Partition::world({p, 1, 1}))});
    if (p == 4) {
      const Partition grid = Partition::world({2, 1, 2});
      l.push_back({"uneven", TensorSpace(grid, Decomposition::blocks(shape, grid.shape(),
                                                                     {{1, 4}, {kC}, {3, 1}}))});
    } else {
      // Along the last axis: 1 entry to each of the first p - 1 ranks, the rest to the last.
      std::vector<std::int64_t> ext(static_cast<std::size_t>(p), 1);
      ext.back() = kL - (p - 1);
      const Partition line = Partition::world({1, 1, p});
      l.push_back({"uneven", TensorSpace(line, Decomposition::blocks(shape, line.shape(),
                                                                     {{kN}, {kC}, ext}))});
    }
    if (p > 1) {
      std::vector<int> ranks;
      for (int r = 1; r < p; ++r) ranks.push_back(r);
      std::vector<std::int64_t> ext(static_cast<std::size_t>(p - 1), 1);
      ext.front() = kN - (p - 2);
      const Partition some = Partition::world({p - 1, 1, 1}, ranks);
      l.push_back({"rank 0 idle", TensorSpace(some, Decomposition::blocks(shape, some.shape(),
                                                                          {ext, {kC}, {kL}}))});
    }
    return l;
  }();
  return all;
}

using Entry = std::function<double(std::int64_t)>;  // a global tensor, entry by global index

double u(std::uint64_t seed, std::int64_t g) {
  return random::uniform(seed, static_cast<std::uint64_t>(g));
}

// The global tensor `f` in `space`: this rank's box.
template <class T>
DistTensor<T> tensor_of(const TensorSpace& space, const Entry& f) {
  DistTensor<T> x(space);
  const std::vector<std::int64_t> idx = space.global_indices();
  if (idx.empty()) return x;
  std::vector<T> v(idx.size());
  for (std::size_t i = 0; i < idx.size(); ++i) v[i] = static_cast<T>(f(idx[i]));
  x.local().copy_from(Tensor<T>::from_vector(space.local_shape(), v));
  return x;
}

template <class T>
using LossFn = std::function<Var<T>(Tape&, const Var<T>&, const DistTensor<T>&, Reduction)>;

// One loss with its options: torch's definition of a term, computed here in double, and the loss
// in float and double.
struct Case {
  std::string name;
  Entry x, t;
  std::function<double(double x, double t, std::int64_t g)> term;
  LossFn<double> loss;
  LossFn<float> loss_f;
  bool batchmean = false;
};

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double log_clamped(double v) { return std::max(std::log(v), -100.0); }

// The positive weights of the two pos_weight shapes below, at global index g.
double weight_last(std::int64_t g) { return 0.5 + 0.75 * double(g % kL); }         // [L]
double weight_class(std::int64_t g) { return 2.0 - 0.5 * double((g / kL) % kC); }  // [C, 1]

template <class T>
Tensor<T> pos_weight_tensor(const Shape& shape, const Entry& f) {
  std::vector<T> v(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) {
    // The entry's global index of an input entry it weights: along the last axis (shape [L]) or
    // the class axis (shape [C, 1]).
    const std::int64_t g = shape.rank() == 1 ? std::int64_t(i) : std::int64_t(i) * kL;
    v[i] = static_cast<T>(f(g));
  }
  return Tensor<T>::from_vector(shape, v);
}

// Binds a loss of options O to both precisions, the reduction set per call.
#define DISTOP_BOTH(fn, opts)                                                        \
  [](Tape& tape, const Var<double>& x, const DistTensor<double>& t, Reduction r) {   \
    auto o = opts<double>();                                                         \
    o.reduction = r;                                                                 \
    return fn(tape, x, t, o);                                                        \
  },                                                                                 \
      [](Tape& tape, const Var<float>& x, const DistTensor<float>& t, Reduction r) { \
        auto o = opts<float>();                                                      \
        o.reduction = r;                                                             \
        return fn(tape, x, t, o);                                                    \
      }

template <class T>
loss::L1Options l1_opts() {
  return {};
}
template <class T>
loss::MSEOptions mse_opts() {
  return {};
}
template <class T>
loss::PoissonNLLOptions poisson_log() {
  return {};
}
template <class T>
loss::PoissonNLLOptions poisson_log_full() {
  return {.log_input = true, .full = true};
}
template <class T>
loss::PoissonNLLOptions poisson_rate_full() {
  return {.log_input = false, .full = true};
}
template <class T>
loss::PoissonNLLOptions poisson_rate() {
  return {.log_input = false, .eps = 1e-3};
}
template <class T>
loss::BCEOptions bce_opts() {
  return {};
}
template <class T>
loss::BCEWithLogitsOptions<T> logits_opts() {
  return {};
}
template <class T>
loss::BCEWithLogitsOptions<T> logits_last() {
  return {.pos_weight = pos_weight_tensor<T>(Shape{kL}, weight_last)};
}
template <class T>
loss::BCEWithLogitsOptions<T> logits_class() {
  return {.pos_weight = pos_weight_tensor<T>(Shape{kC, 1}, weight_class)};
}
template <class T>
loss::KLDivOptions kl_opts() {
  return {};
}
template <class T>
loss::KLDivOptions kl_log_target() {
  return {.log_target = true};
}

double stirling(double t) {
  return t > 1 ? t * std::log(t) - t + 0.5 * std::log(2 * std::numbers::pi * t) : 0.0;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"l1", [](std::int64_t g) { return 4 * u(1, g) - 2; },
       [](std::int64_t g) { return 4 * u(2, g) - 2; },
       [](double x, double t, std::int64_t) { return std::abs(x - t); },
       DISTOP_BOTH(loss::l1, l1_opts), false},
      {"mse", [](std::int64_t g) { return 4 * u(3, g) - 2; },
       [](std::int64_t g) { return 4 * u(4, g) - 2; },
       [](double x, double t, std::int64_t) { return (x - t) * (x - t); },
       DISTOP_BOTH(loss::mse, mse_opts), false},
      // Counts 0-4 as targets, so that Stirling's term (t > 1) is both on and off.
      {"poisson_nll", [](std::int64_t g) { return 2 * u(5, g) - 1; },
       [](std::int64_t g) { return std::floor(5 * u(6, g)); },
       [](double x, double t, std::int64_t) { return std::exp(x) - t * x; },
       DISTOP_BOTH(loss::poisson_nll, poisson_log), false},
      {"poisson_nll full", [](std::int64_t g) { return 2 * u(5, g) - 1; },
       [](std::int64_t g) { return std::floor(5 * u(6, g)); },
       [](double x, double t, std::int64_t) { return std::exp(x) - t * x + stirling(t); },
       DISTOP_BOTH(loss::poisson_nll, poisson_log_full), false},
      {"poisson_nll rate full", [](std::int64_t g) { return 0.1 + 3 * u(7, g); },
       [](std::int64_t g) { return std::floor(5 * u(8, g)); },
       [](double x, double t, std::int64_t) { return x - t * std::log(x + 1e-8) + stirling(t); },
       DISTOP_BOTH(loss::poisson_nll, poisson_rate_full), false},
      {"poisson_nll rate eps", [](std::int64_t g) { return 0.1 + 3 * u(7, g); },
       [](std::int64_t g) { return std::floor(5 * u(8, g)); },
       [](double x, double t, std::int64_t) { return x - t * std::log(x + 1e-3); },
       DISTOP_BOTH(loss::poisson_nll, poisson_rate), false},
      {"bce", [](std::int64_t g) { return 0.02 + 0.96 * u(9, g); },
       [](std::int64_t g) { return u(10, g); },
       [](double x, double t, std::int64_t) {
         return -(t * log_clamped(x) + (1 - t) * log_clamped(1 - x));
       },
       DISTOP_BOTH(loss::bce, bce_opts), false},
      // The logits' terms in their textbook form, -(p t log s(x) + (1 - t) log(1 - s(x))).
      {"bce_with_logits", [](std::int64_t g) { return 8 * u(11, g) - 4; },
       [](std::int64_t g) { return u(12, g); },
       [](double x, double t, std::int64_t) {
         return -(t * std::log(sigmoid(x)) + (1 - t) * std::log(1 - sigmoid(x)));
       },
       DISTOP_BOTH(loss::bce_with_logits, logits_opts), false},
      {"bce_with_logits pos_weight [L]", [](std::int64_t g) { return 8 * u(11, g) - 4; },
       [](std::int64_t g) { return u(12, g); },
       [](double x, double t, std::int64_t g) {
         return -(weight_last(g) * t * std::log(sigmoid(x)) + (1 - t) * std::log(1 - sigmoid(x)));
       },
       DISTOP_BOTH(loss::bce_with_logits, logits_last), false},
      {"bce_with_logits pos_weight [C, 1]", [](std::int64_t g) { return 8 * u(11, g) - 4; },
       [](std::int64_t g) { return u(12, g); },
       [](double x, double t, std::int64_t g) {
         return -(weight_class(g) * t * std::log(sigmoid(x)) + (1 - t) * std::log(1 - sigmoid(x)));
       },
       DISTOP_BOTH(loss::bce_with_logits, logits_class), false},
      // Probabilities with some exact zeros (0 log 0 = 0) against log-probabilities.
      {"kl_div", [](std::int64_t g) { return -3 * u(13, g); },
       [](std::int64_t g) { return g % 5 == 0 ? 0.0 : u(14, g); },
       [](double x, double t, std::int64_t) { return t == 0 ? 0.0 : t * (std::log(t) - x); },
       DISTOP_BOTH(loss::kl_div, kl_opts), true},
      {"kl_div log_target", [](std::int64_t g) { return -3 * u(13, g); },
       [](std::int64_t g) { return -3 * u(15, g); },
       [](double x, double t, std::int64_t) { return std::exp(t) * (t - x); },
       DISTOP_BOTH(loss::kl_div, kl_log_target), true},
  };
  return all;
}
#undef DISTOP_BOTH

const Case& find_case(const std::string& name) {
  for (const Case& c : cases())
    if (c.name == name) return c;
  throw Error("find_case", "no case " + name);
}

std::vector<Reduction> reductions_of(const Case& c) {
  std::vector<Reduction> r = {Reduction::none, Reduction::sum, Reduction::mean};
  if (c.batchmean) r.push_back(Reduction::batchmean);
  return r;
}

double divisor(Reduction r) {
  return r == Reduction::mean ? double(kNumel) : r == Reduction::batchmean ? double(kN) : 1.0;
}

std::string what(const Case& c, Reduction r, const Layout& l) {
  return c.name + ", reduction " + std::string(loss::reduction_name(r)) + ", " + l.name + " (" +
         l.space.str() + ")";
}

// A loss's shape, partition and this rank's share of it.
template <class T>
void expect_a_loss(const Var<T>& l, const Partition& p) {
  EXPECT_EQ(l.space().global_shape(), Shape{1});
  EXPECT_TRUE(l.space().partition().same_as(p));
  EXPECT_EQ(l.value().local_numel(), p.active() ? 1 : 0);
}

TEST(DistributedLosses, EqualTorchsDefinitionOnEveryPartition) {
  // The components of every distributed loss below, summed over the ranks at the end by one
  // allreduce (loss::total's sum, batched), against the one-rank references.
  std::vector<double> components, references;
  for (const Case& c : cases()) {
    // The reference on the global tensors, and every term of it.
    std::vector<double> terms(kNumel);
    double sum = 0;
    for (std::int64_t g = 0; g < kNumel; ++g) sum += terms[g] = c.term(c.x(g), c.t(g), g);
    for (const Layout& l : layouts()) {
      const Var<double> x(tensor_of<double>(l.space, c.x), false);
      const DistTensor<double> t = tensor_of<double>(l.space, c.t);
      const std::vector<std::int64_t> idx = l.space.global_indices();
      for (Reduction r : reductions_of(c)) {
        SCOPED_TRACE(what(c, r, l));
        Tape tape;
        const Var<double> y = c.loss(tape, x, t, r);
        if (r == Reduction::none) {
          ASSERT_TRUE(y.space() == l.space);
          const std::vector<double> v = y.value().local().to_vector();
          ASSERT_EQ(v.size(), idx.size());
          for (std::size_t i = 0; i < v.size(); ++i)
            EXPECT_NEAR(v[i], terms[idx[i]], 1e-13 * std::max(1.0, std::abs(terms[idx[i]])))
                << "global entry " << idx[i];
          continue;
        }
        expect_a_loss(y, l.space.partition());
        // This rank's component is its box's sum over the global count.
        double mine = 0;
        for (std::int64_t g : idx) mine += terms[g];
        const double component = idx.empty() ? 0.0 : y.value().local().to_vector()[0];
        EXPECT_NEAR(component, mine / divisor(r), 1e-13 * std::max(1.0, std::abs(mine)));
        const double want = sum / divisor(r);
        if (l.alone) {
          EXPECT_NEAR(component, want, 1e-13 * std::max(1.0, std::abs(want)));  // on this rank
        } else {
          components.push_back(component);
          references.push_back(want);
        }
      }
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, components.data(), static_cast<int>(components.size()), MPI_DOUBLE,
                MPI_SUM, MPI_COMM_WORLD);
  for (std::size_t i = 0; i < components.size(); ++i)
    EXPECT_NEAR(components[i], references[i], 1e-13 * std::max(1.0, std::abs(references[i])))
        << "loss " << i;
}

// The float losses against the double reference, to float's rounding.
TEST(DistributedLosses, FloatAgreesWithDouble) {
  const Layout& l = layouts().back();
  for (const Case& c : cases()) {
    double sum = 0;
    for (std::int64_t g = 0; g < kNumel; ++g) sum += c.term(c.x(g), c.t(g), g);
    const Var<float> x(tensor_of<float>(l.space, c.x), false);
    const DistTensor<float> t = tensor_of<float>(l.space, c.t);
    Tape tape;
    const double got = loss::total(c.loss_f(tape, x, t, Reduction::mean));
    EXPECT_NEAR(got, sum / kNumel, 1e-5 * std::max(1.0, std::abs(sum / kNumel))) << c.name;
  }
}

// The gradients against central differences, on the partly idle layout (uneven at one rank):
// every term's derivative through reduction none (each entry weighted differently), and the
// reducing path of the losses (shared by all) through a few of them.
TEST(DistributedLosses, GradientsMatchFiniteDifferences) {
  const Layout& l = layouts().back();
  for (const Case& c : cases()) {
    Var<double> x(tensor_of<double>(l.space, c.x), true);
    const DistTensor<double> t = tensor_of<double>(l.space, c.t);
    std::vector<Reduction> reductions = {Reduction::none};
    if (c.name == "mse" || c.name == "bce_with_logits pos_weight [L]") {
      reductions.push_back(Reduction::mean);
    }
    if (c.batchmean) reductions.push_back(Reduction::batchmean);
    for (Reduction r : reductions) {
      const auto report =
          dt::gradcheck([&](Tape& tape) { return c.loss(tape, x, t, r); }, {x}, {.max_entries = 3});
      EXPECT_TRUE(report.passed) << what(c, r, l) << ": " << report.str();
    }
  }
}

// backward(tape, loss) seeds 1: torch's gradient of the mean, on each rank's box.
TEST(DistributedLosses, BackwardOfTheMeanIsTorchsGradient) {
  const Layout& l = layouts().back();
  const Case& c = find_case("bce_with_logits pos_weight [C, 1]");
  Var<double> x(tensor_of<double>(l.space, c.x), true);
  const DistTensor<double> t = tensor_of<double>(l.space, c.t);
  Tape tape;
  Var<double> y = c.loss(tape, x, t, Reduction::mean);
  backward(tape, y);
  const std::vector<std::int64_t> idx = l.space.global_indices();
  const std::vector<double> grad = x.grad().local().to_vector();
  ASSERT_EQ(grad.size(), idx.size());
  for (std::size_t i = 0; i < idx.size(); ++i) {
    const std::int64_t g = idx[i];
    const double p = weight_class(g), tv = c.t(g), w = 1 + (p - 1) * tv;
    EXPECT_NEAR(grad[i], (w * sigmoid(c.x(g)) - p * tv) / kNumel, 1e-15) << g;
  }
}

// torch clamps BCE's logs at -100: inputs of exactly 0 and 1 give finite terms.
TEST(DistributedLosses, BCEClampsItsLogsAtMinus100) {
  const Entry x = [](std::int64_t g) { return double(g % 3) / 2; };  // 0, 0.5, 1
  const Entry t = [](std::int64_t g) { return double((g / 3) % 2); };
  for (const Layout& l : layouts()) {
    Tape tape;
    const Var<double> y = loss::bce(tape, Var<double>(tensor_of<double>(l.space, x)),
                                    tensor_of<double>(l.space, t), {.reduction = Reduction::none});
    const std::vector<std::int64_t> idx = l.space.global_indices();
    const std::vector<double> v = y.value().local().to_vector();
    for (std::size_t i = 0; i < idx.size(); ++i) {
      const double xv = x(idx[i]), tv = t(idx[i]);
      const double want = xv == 0.5 ? std::log(2.0) : (xv == tv ? 0.0 : 100.0);
      EXPECT_NEAR(v[i], want, 1e-12) << l.name << ", global entry " << idx[i];
    }
  }
}

// ---- Soft Dice ----------------------------------------------------------------------------------

const Entry dice_p = [](std::int64_t g) { return u(21, g); };
const Entry dice_t = [](std::int64_t g) { return u(22, g) < 0.4 ? 1.0 : 0.0; };

double dice_reference(double smooth) {
  double i = 0, s = 0;
  for (std::int64_t g = 0; g < kNumel; ++g) {
    i += dice_p(g) * dice_t(g);
    s += dice_p(g) + dice_t(g);
  }
  return 1 - (2 * i + smooth) / (s + smooth);
}

TEST(DistributedLosses, DiceIsTheGlobalSoftDice) {
  for (double smooth : {1.0, 0.0}) {
    const double want = dice_reference(smooth);
    for (const Layout& l : layouts()) {
      SCOPED_TRACE(l.name + ", smooth " + std::to_string(smooth));
      Tape tape;
      const Var<double> y = loss::dice(tape, Var<double>(tensor_of<double>(l.space, dice_p)),
                                       tensor_of<double>(l.space, dice_t), {.smooth = smooth});
      expect_a_loss(y, l.space.partition());
      // The partition's first rank holds the loss, the others 0.
      if (l.space.partition().active()) {
        EXPECT_NEAR(y.value().local().to_vector()[0], l.space.partition().index() == 0 ? want : 0.0,
                    1e-14);
      }
      EXPECT_NEAR(loss::total(y), want, 1e-14);
    }
  }
  const Layout& l = layouts().back();
  Tape tape;
  const double got = loss::total(loss::dice(tape, Var<float>(tensor_of<float>(l.space, dice_p)),
                                            tensor_of<float>(l.space, dice_t)));
  EXPECT_NEAR(got, dice_reference(1.0), 1e-5);
}

TEST(DistributedLosses, DiceGradientsMatchFiniteDifferences) {
  for (const Layout& l : layouts()) {
    Var<double> x(tensor_of<double>(l.space, dice_p), true);
    const DistTensor<double> t = tensor_of<double>(l.space, dice_t);
    const auto report =
        dt::gradcheck([&](Tape& tape) { return loss::dice(tape, x, t, {.smooth = 0.5}); }, {x},
                      {.max_entries = 4});
    EXPECT_TRUE(report.passed) << l.name << ": " << report.str();
  }
}

// ---- Bad arguments: the same Error on every rank
// -------------------------------------------------

TEST(DistributedLosses, ATargetInAnotherSpaceIsAnError) {
  const TensorSpace& s = layouts()[1].space;
  const Var<double> x(tensor_of<double>(s, find_case("l1").x), true);
  const DistTensor<double> other(TensorSpace(Shape{kN, kC, kL + 1}, s.partition()));
  Tape tape;
  for (const Case& c : cases()) {
    const std::string m = test::error_of([&] { c.loss(tape, x, other, Reduction::mean); });
    EXPECT_NE(m.find("target"), std::string::npos) << c.name << ": " << m;
  }
  EXPECT_THROW(loss::dice(tape, x, other), Error);
  // The same global shape split otherwise is another space too.
  if (world_size() > 1) {
    const DistTensor<double> moved(layouts()[2].space);
    EXPECT_THROW(loss::mse(tape, x, moved), Error);
  }
}

TEST(DistributedLosses, BatchmeanIsKLDivsAlone) {
  const TensorSpace& s = layouts()[1].space;
  const Var<double> x(tensor_of<double>(s, find_case("bce").x), true);
  const DistTensor<double> t = tensor_of<double>(s, find_case("bce").t);
  Tape tape;
  for (const Case& c : cases()) {
    if (c.batchmean) continue;
    const std::string m = test::error_of([&] { c.loss(tape, x, t, Reduction::batchmean); });
    EXPECT_NE(m.find("batchmean"), std::string::npos) << c.name << ": " << m;
  }
}

// An entry outside [0, 1] on the last rank alone: every rank throws torch's complaint.
TEST(DistributedLosses, BCEOutsideZeroOneIsAnErrorOnEveryRank) {
  const TensorSpace& s = layouts()[1].space;
  const int last = world_size() - 1;
  const Entry ok = [](std::int64_t g) { return 0.1 + 0.8 * u(9, g); };
  DistTensor<double> bad = tensor_of<double>(s, ok);
  if (world_rank() == last) {
    std::vector<double> v = bad.local().to_vector();
    v.back() = 1.5;
    bad.local().copy_from(Tensor<double>::from_vector(bad.local().shape(), v));
  }
  const DistTensor<double> good = tensor_of<double>(s, ok);
  Tape tape;
  std::string m = test::error_of([&] { loss::bce(tape, Var<double>(bad), good); });
  EXPECT_NE(m.find("input in [0, 1]"), std::string::npos) << m;
  m = test::error_of([&] { loss::bce(tape, Var<double>(good), bad); });
  EXPECT_NE(m.find("target in [0, 1]"), std::string::npos) << m;
}

TEST(DistributedLosses, BadOptionsAreErrors) {
  const TensorSpace& s = layouts()[1].space;
  const Var<double> x(tensor_of<double>(s, find_case("bce_with_logits").x), true);
  const DistTensor<double> t = tensor_of<double>(s, find_case("bce_with_logits").t);
  Tape tape;
  // pos_weight must broadcast against [N, C, L]: [C] does not (it would align with L).
  std::string m = test::error_of(
      [&] { loss::bce_with_logits(tape, x, t, {.pos_weight = Tensor<double>(Shape{kC})}); });
  EXPECT_NE(m.find("pos_weight"), std::string::npos) << m;
  EXPECT_THROW(loss::bce_with_logits(tape, x, t, {.pos_weight = Tensor<double>(Shape{2, kC, kL})}),
               Error);
  // Options without a pos_weight name no member that lacks a default.
  EXPECT_NO_THROW(loss::bce_with_logits(tape, x, t, {.reduction = Reduction::sum}));
  EXPECT_THROW(loss::poisson_nll(tape, x, t, {.eps = -1.0}), Error);
  EXPECT_THROW(loss::dice(tape, x, t, {.smooth = -1.0}), Error);
  EXPECT_EQ(loss::parse_reduction("batchmean"), Reduction::batchmean);
  m = test::error_of([] { loss::parse_reduction("avg"); });
  EXPECT_NE(m.find("none, sum, mean, batchmean"), std::string::npos) << m;
}

}  // namespace
