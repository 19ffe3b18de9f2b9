#include "distop/kernels/attention_block.hpp"

#include <Kokkos_Core.hpp>
#include <cfloat>
#include <cmath>
#include <limits>

#include "distop/core/error.hpp"
#include "distop/core/random.hpp"
#include "kokkos_math.hpp"
#include "team.hpp"

namespace distop::kernels {

namespace {

// The mask and dropout of one block, captured by value in the kernels.
struct BlockRule {
  std::int64_t q_pos, k_pos, q_index, k_index, key_stride;
  bool causal;
  double p, keep_scale;
  std::uint64_t seed, key_base;

  explicit BlockRule(const AttentionBlock& b)
      : q_pos(b.q_pos),
        k_pos(b.k_pos),
        q_index(b.q_index),
        k_index(b.k_index),
        key_stride(b.key_stride),
        causal(b.causal),
        p(b.dropout),
        keep_scale(b.dropout < 1 ? 1.0 / (1.0 - b.dropout) : 0.0),
        seed(b.seed),
        key_base(b.key_base) {}

  KOKKOS_INLINE_FUNCTION bool masked(std::int64_t i, std::int64_t j) const {
    return causal && k_pos + j > q_pos + i;
  }
  // The dropout factor of entry (i, j): 1 without dropout.
  KOKKOS_INLINE_FUNCTION double factor(std::int64_t i, std::int64_t j) const {
    if (p <= 0) return 1.0;
    const auto g = key_base + static_cast<std::uint64_t>((q_index + i) * key_stride + k_index + j);
    return random::uniform(seed, g) >= p ? keep_scale : 0.0;
  }
};

void check_block(const AttentionBlock& b, const char* op) {
  DISTOP_CHECK(b.dropout >= 0 && b.dropout <= 1, op,
               "the dropout probability must lie in [0, 1], found ", b.dropout);
}

template <class A, class B>
void check_rows(const A& a, const B& b, const char* op, const char* what) {
  DISTOP_CHECK(b.rank() == 1 && b.extent(0) == a.extent(0), op, what, " has shape ",
               b.shape().str(), ", expected one entry per row of ", a.shape().str());
}

}  // namespace

template <class T>
void online_softmax_block(Tensor<T>& s, Tensor<double>& row_max, Tensor<double>& row_sum,
                          Tensor<T>& out, const AttentionBlock& block) {
  constexpr const char* op = "online_softmax_block";
  check_block(block, op);
  DISTOP_CHECK(s.rank() == 2 && out.rank() == 2 && out.extent(0) == s.extent(0), op,
               "expected scores [m, n] and an output [m, d], found ", s.shape().str(), " and ",
               out.shape().str());
  check_rows(s, row_max, op, "row_max");
  check_rows(s, row_sum, op, "row_sum");
  const std::int64_t n = s.extent(1), d = out.extent(1);
  if (s.extent(0) == 0) return;
  const BlockRule rule(block);
  auto sv = s.view();
  auto mv = row_max.view();
  auto lv = row_sum.view();
  auto ov = out.view();
  // Outside the kernel: numeric_limits' functions are host functions to nvcc.
  constexpr double inf = std::numeric_limits<double>::infinity();
  Kokkos::parallel_for(
      "distop::online_softmax_block", team_per_row(s.extent(0), op),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const std::int64_t i = team.league_rank();
        const std::int64_t row = i * n;
        const double block_max = team_max(team, n, [&](std::int64_t j) {
          return rule.masked(i, j) ? -inf : static_cast<double>(sv(row + j));
        });
        const double old_max = mv(i);
        const double new_max = block_max > old_max ? block_max : old_max;
        if (!(new_max > -DBL_MAX)) {  // every entry of the row masked so far
          team_for(team, n, [&](std::int64_t j) { sv(row + j) = T(0); });
          return;
        }
        const double a = old_max > -DBL_MAX ? kmath::exp(old_max - new_max) : 0.0;
        const double sum = team_sum(team, n, [&](std::int64_t j) {
          const double e = rule.masked(i, j) ? 0.0 : kmath::exp(sv(row + j) - new_max);
          sv(row + j) = static_cast<T>(e * rule.factor(i, j));
          return e;
        });
        team_for(team, d,
                 [&](std::int64_t c) { ov(i * d + c) = static_cast<T>(a * ov(i * d + c)); });
        team.team_barrier();
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          mv(i) = new_max;
          lv(i) = a * lv(i) + sum;
        });
      });
}

template <class T>
void online_softmax_finish(Tensor<T>& out, const Tensor<double>& row_max,
                           const Tensor<double>& row_sum, Tensor<double>& lse) {
  constexpr const char* op = "online_softmax_finish";
  DISTOP_CHECK(out.rank() == 2, op, "expected an output [m, d], found ", out.shape().str());
  check_rows(out, row_max, op, "row_max");
  check_rows(out, row_sum, op, "row_sum");
  check_rows(out, lse, op, "lse");
  const std::int64_t d = out.extent(1);
  auto ov = out.view();
  auto mv = row_max.view();
  auto lv = row_sum.view();
  auto ev = lse.view();
  Kokkos::parallel_for(
      "distop::online_softmax_finish", Kokkos::RangePolicy<ExecSpace>(0, out.extent(0)),
      KOKKOS_LAMBDA(std::int64_t i) {
        // A row that attended to nothing divides 0 by 0, NaN, as softmax over a row masked out
        // entirely does.
        const double inv = 1.0 / lv(i);
        for (std::int64_t c = 0; c < d; ++c) ov(i * d + c) = static_cast<T>(ov(i * d + c) * inv);
        ev(i) = mv(i) + kmath::log(lv(i));
      });
}

template <class T>
void attention_row_dot(const Tensor<T>& dout, const Tensor<T>& out, Tensor<double>& delta) {
  constexpr const char* op = "attention_row_dot";
  DISTOP_CHECK(out.rank() == 2 && dout.shape() == out.shape(), op,
               "expected rows [m, d] of one shape, found ", dout.shape().str(), " and ",
               out.shape().str());
  check_rows(out, delta, op, "delta");
  const std::int64_t d = out.extent(1);
  auto gv = dout.view();
  auto ov = out.view();
  auto dv = delta.view();
  Kokkos::parallel_for(
      "distop::attention_row_dot", Kokkos::RangePolicy<ExecSpace>(0, out.extent(0)),
      KOKKOS_LAMBDA(std::int64_t i) {
        double sum = 0;
        for (std::int64_t c = 0; c < d; ++c)
          sum += static_cast<double>(gv(i * d + c)) * static_cast<double>(ov(i * d + c));
        dv(i) = sum;
      });
}

template <class T>
void attention_block_backward(Tensor<T>& s, Tensor<T>& dp, const Tensor<double>& lse,
                              const Tensor<double>& delta, double scale,
                              const AttentionBlock& block) {
  constexpr const char* op = "attention_block_backward";
  check_block(block, op);
  DISTOP_CHECK(s.rank() == 2 && dp.shape() == s.shape(), op,
               "expected scores and their gradient [m, n] of one shape, found ", s.shape().str(),
               " and ", dp.shape().str());
  check_rows(s, lse, op, "lse");
  check_rows(s, delta, op, "delta");
  const std::int64_t n = s.extent(1);
  const BlockRule rule(block);
  auto sv = s.view();
  auto pv = dp.view();
  auto ev = lse.view();
  auto dv = delta.view();
  Kokkos::parallel_for(
      "distop::attention_block_backward", Kokkos::RangePolicy<ExecSpace>(0, s.numel()),
      KOKKOS_LAMBDA(std::int64_t e) {
        const std::int64_t i = e / n, j = e % n;
        const double p = rule.masked(i, j) ? 0.0 : kmath::exp(sv(e) - ev(i));
        const double z = rule.factor(i, j);
        sv(e) = static_cast<T>(p * z);
        pv(e) = static_cast<T>(scale * p * (z * pv(e) - dv(i)));
      });
}

#define DISTOP_ATTENTION_BLOCK(T)                                                               \
  template void online_softmax_block(Tensor<T>&, Tensor<double>&, Tensor<double>&, Tensor<T>&,  \
                                     const AttentionBlock&);                                    \
  template void online_softmax_finish(Tensor<T>&, const Tensor<double>&, const Tensor<double>&, \
                                      Tensor<double>&);                                         \
  template void attention_row_dot(const Tensor<T>&, const Tensor<T>&, Tensor<double>&);         \
  template void attention_block_backward(Tensor<T>&, Tensor<T>&, const Tensor<double>&,         \
                                         const Tensor<double>&, double, const AttentionBlock&);
DISTOP_ATTENTION_BLOCK(float)
DISTOP_ATTENTION_BLOCK(double)
#undef DISTOP_ATTENTION_BLOCK

}  // namespace distop::kernels
