#pragma once
// Internal: the row kernels of the sharded contrastive losses (src/loss/contrastive.cpp), portable
// Kokkos kernels over one tile of logits at a time (the GEMMs between them are kernels::gemm). A
// tile is nq query rows by nj key columns, row-major, in a View of the tensors' memory space; one
// team per query row shares the row's columns (src/kernels/team.hpp: on the host a team is one
// thread and the row a plain loop, the arithmetic and its order those of the loops these kernels
// replaced). Templates over the View types, so that tests/unit/contrastive_test.cpp runs them
// in a second memory space as well.
//
// Host fast path: on the host each kernel first tries its form in namespace host_rows below, a
// plain loop per row over raw pointers, with the excluded key split out of the loops. The team
// form's inner loops (a runtime stride) kept the running maximum in memory on the host and made
// NT-Xent and CLIP 15-20 % slower (bench_contrastive, B = 4096, D = 128). The host forms do the
// same arithmetic in the same order (the unit test compares the two forms bit for bit); like the
// other kernels' host fast paths they are compiled only with DISTOP_ENABLE_HOST_KERNELS=ON and
// skipped under DISTOP_HOST_KERNELS=off (kernels::host_kernels_enabled()).

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "../kernels/kokkos_math.hpp"
#include "../kernels/space.hpp"
#include "../kernels/team.hpp"
#include "distop/kernels/simd.hpp"

namespace distop::loss::detail {

enum class ContrastiveKind { ntxent, clip, siglip };

// Where a tile lies. Its rows are rows [i0, i0 + nq) of a head and statistics rows [r0, r0 + nq);
// its columns the head's keys [j0, j0 + nj). In an own block (`own`: the query payload against
// itself, n rows per set) the tile's rows may have their positive key and (NT-Xent) their excluded
// key among its columns.
struct Tile {
  std::int64_t nq = 0, nj = 0;
  std::int64_t r0 = 0, i0 = 0, j0 = 0;
  std::int64_t n = 0;
  bool own = false;
};

// The positive key (head-local index) of head row i in an own block of n rows per set, and the key
// left out of the denominator (-1: none).
KOKKOS_INLINE_FUNCTION std::int64_t positive_key(ContrastiveKind kind, std::int64_t i,
                                                 std::int64_t n) {
  return kind == ContrastiveKind::ntxent ? (i + n) % (2 * n) : i;
}
KOKKOS_INLINE_FUNCTION std::int64_t excluded_key(ContrastiveKind kind, std::int64_t i) {
  return kind == ContrastiveKind::ntxent ? i : -1;
}

// Head row `row`'s positive and left-out keys as columns of a tile whose first key is j0 (-1: none,
// and both -1 in a tile of another rank's keys, own false).
struct TileKeys {
  std::int64_t pos, ex;
};
KOKKOS_INLINE_FUNCTION TileKeys tile_keys(ContrastiveKind kind, bool own, std::int64_t row,
                                          std::int64_t n, std::int64_t j0) {
  if (!own) return {-1, -1};
  const std::int64_t ex = excluded_key(kind, row);
  return {positive_key(kind, row, n) - j0, ex >= 0 ? ex - j0 : -1};
}

// Per statistics row: the running maximum and sum of exp(l - max) of the online log-sum-exp, the
// positive logit, and after finish_rows the log-sum-exp.
template <class Space>
struct RowStatViews {
  using View = Kokkos::View<double*, Space>;
  View max, sum, pos, lse;

  // n rows of an empty log-sum-exp (max -inf, sum 0).
  void reset(std::int64_t n) {
    max = View(Kokkos::view_alloc(Kokkos::WithoutInitializing, "distop::contrastive::max"), n);
    sum = View("distop::contrastive::sum", n);
    pos = View("distop::contrastive::pos", n);
    lse = View(Kokkos::view_alloc(Kokkos::WithoutInitializing, "distop::contrastive::lse"), n);
    Kokkos::deep_copy(max, -std::numeric_limits<double>::infinity());
  }
};

namespace host_rows {

// Whether the host forms apply to Views of Space: host builds with the fast paths compiled, and
// host memory (not the unit test's second space, which takes the portable forms).
template <class Space>
inline constexpr bool kApplies = kernels::kHostKernels&& std::is_same_v<Space, Kokkos::HostSpace>;

// The keys [0, e) and [e + 1, nj) of a row whose excluded key is ex: two runs either side of it.
inline std::int64_t split_at(std::int64_t nj, std::int64_t ex) {
  return ex >= 0 && ex < nj ? ex : nj;
}

template <class T>
void fold_row(const T* row, std::int64_t nj, std::int64_t pos, std::int64_t ex, double& max,
              double& sum, double& positive) {
  const double none = Kokkos::reduction_identity<double>::max();
  const std::int64_t e = split_at(nj, ex);
  double m = none;
  for (std::int64_t j = 0; j < e; ++j) m = std::max(m, static_cast<double>(row[j]));
  for (std::int64_t j = e + 1; j < nj; ++j) m = std::max(m, static_cast<double>(row[j]));
  if (pos >= 0 && pos < nj) positive = row[pos];
  if (m == none) return;
  const double m_new = max > m ? max : m;
  const T mt = static_cast<T>(m_new);
  double acc = 0;
  for (std::int64_t j = 0; j < e; ++j) acc += static_cast<double>(std::exp(row[j] - mt));
  for (std::int64_t j = e + 1; j < nj; ++j) acc += static_cast<double>(std::exp(row[j] - mt));
  sum = sum * std::exp(max - m_new) + acc;
  max = m_new;
}

template <class T>
double siglip_row(const T* row, std::int64_t nj, std::int64_t pos) {
  double acc = 0;
  for (std::int64_t j = 0; j < nj; ++j) {
    const double l = static_cast<double>(row[j]);
    const double x = j == pos ? l : -l;
    acc += (x < 0 ? -x : 0.0) + std::log1p(std::exp(-std::abs(x)));
  }
  return acc;
}

template <class T>
void gradient_row(ContrastiveKind kind, T* row, std::int64_t nj, std::int64_t pos, std::int64_t ex,
                  double lse_d, double w, double bias, double* partial) {
  double sum_gs = 0, sum_g = 0;
  if (kind == ContrastiveKind::siglip) {
    for (std::int64_t j = 0; j < nj; ++j) {
      const double l = static_cast<double>(row[j]);
      const double z = j == pos ? 1.0 : -1.0;
      const double x = -z * l;
      const double sig = x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x));
      const double g = -w * z * sig;
      sum_gs += g * (l - bias);
      sum_g += g;
      row[j] = static_cast<T>(g);
    }
  } else {
    const T lse = static_cast<T>(lse_d);
    for (std::int64_t j = 0; j < nj; ++j) {
      const double l = static_cast<double>(row[j]);
      double g = j == ex ? 0.0 : w * static_cast<double>(std::exp(row[j] - lse));
      if (j == pos) g -= w;
      sum_gs += g * l;
      sum_g += g;
      row[j] = static_cast<T>(g);
    }
  }
  partial[0] = sum_gs;
  partial[1] = sum_g;
}

}  // namespace host_rows

// s += bias over the first n entries (SigLIP's logits).
template <class SView, class T>
void add_bias(const SView& s, std::int64_t n, T bias) {
  Kokkos::parallel_for(
      "distop::contrastive::bias", Kokkos::RangePolicy<ExecSpace>(0, n),
      KOKKOS_LAMBDA(const std::int64_t e) { s(e) += bias; });
}

// NT-Xent and CLIP: folds the tile's logits s into the statistics of its rows (m' = max(m, max l),
// s' = s e^(m - m') + sum e^(l - m'), leaving out the excluded key) and records positive logits.
// exp is taken in T, as the logits are stored.
template <class SView, class Space>
void fold_tile(ContrastiveKind kind, const Tile& t, const SView& s, const RowStatViews<Space>& st) {
  using T = typename SView::non_const_value_type;
  const auto vmax = st.max, vsum = st.sum, vpos = st.pos;
  const std::int64_t nj = t.nj, r0 = t.r0, i0 = t.i0, j0 = t.j0, n = t.n;
  const bool own = t.own;
  if constexpr (host_rows::kApplies<typename SView::memory_space>) {
    if (kernels::host_kernels_enabled()) {
      T* p = s.data();
      double *mx = vmax.data(), *sm = vsum.data(), *ps = vpos.data();
      Kokkos::parallel_for("distop::contrastive::fold_host",
                           Kokkos::RangePolicy<ExecSpace>(0, t.nq), [=](const std::int64_t i) {
                             const TileKeys keys = tile_keys(kind, own, i0 + i, n, j0);
                             const std::int64_t pos = keys.pos, ex = keys.ex;
                             host_rows::fold_row(p + i * nj, nj, pos, ex, mx[r0 + i], sm[r0 + i],
                                                 ps[r0 + i]);
                           });
      return;
    }
  }
  Kokkos::parallel_for(
      "distop::contrastive::fold", kernels::team_per_row(t.nq, "contrastive loss"),
      KOKKOS_LAMBDA(const kernels::TeamMember& team) {
        const std::int64_t i = team.league_rank();
        const std::int64_t base = i * nj, r = r0 + i;
        const TileKeys keys = tile_keys(kind, own, i0 + i, n, j0);
        const std::int64_t pos = keys.pos, ex = keys.ex;
        const double none = Kokkos::reduction_identity<double>::max();
        const double m = kernels::team_max(team, nj, [&](const std::int64_t j) {
          return j == ex ? none : static_cast<double>(s(base + j));
        });
        if (pos >= 0 && pos < nj)
          Kokkos::single(Kokkos::PerTeam(team), [&]() { vpos(r) = s(base + pos); });
        if (m == none) return;  // only the excluded key
        const double m_old = vmax(r);
        const double m_new = m_old > m ? m_old : m;
        const T mt = static_cast<T>(m_new);
        const double acc = kernels::team_sum(team, nj, [&](const std::int64_t j) {
          return j == ex ? 0.0 : static_cast<double>(kernels::kmath::exp(s(base + j) - mt));
        });
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          vsum(r) = vsum(r) * kernels::kmath::exp(m_old - m_new) + acc;
          vmax(r) = m_new;
        });
      });
}

// SigLIP: the sum over the tile of -log sigmoid(z l) = max(-x, 0) + log1p(e^-|x|), x = z l, with
// z = 1 on the positive pair and -1 elsewhere.
template <class SView>
double siglip_tile_loss(const Tile& t, const SView& s) {
  const std::int64_t nj = t.nj, i0 = t.i0, j0 = t.j0;
  const bool own = t.own;
  double total = 0;
  if constexpr (host_rows::kApplies<typename SView::memory_space>) {
    if (kernels::host_kernels_enabled()) {
      const auto* p = s.data();
      Kokkos::parallel_reduce(
          "distop::contrastive::siglip_host", Kokkos::RangePolicy<ExecSpace>(0, t.nq),
          [=](const std::int64_t i, double& acc) {
            acc += host_rows::siglip_row(p + i * nj, nj, own ? i0 + i - j0 : -1);
          },
          total);
      return total;
    }
  }
  Kokkos::parallel_reduce(
      "distop::contrastive::siglip", kernels::team_per_row(t.nq, "siglip_loss"),
      KOKKOS_LAMBDA(const kernels::TeamMember& team, double& acc) {
        const std::int64_t i = team.league_rank();
        const std::int64_t base = i * nj;
        const std::int64_t pos = own ? i0 + i - j0 : -1;
        const double row = kernels::team_sum(team, nj, [&](const std::int64_t j) {
          const double l = static_cast<double>(s(base + j));
          const double x = j == pos ? l : -l;
          const double ax = x < 0 ? -x : x;
          return (x < 0 ? -x : 0.0) + kernels::kmath::log1p(kernels::kmath::exp(-ax));
        });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { acc += row; });
      },
      total);
  return total;
}

// NT-Xent and CLIP, after every block: lse = max + log(sum) per row; returns sum of (lse - pos).
template <class Space>
double finish_rows(const RowStatViews<Space>& st) {
  const auto vmax = st.max, vsum = st.sum, vpos = st.pos, vlse = st.lse;
  double total = 0;
  Kokkos::parallel_reduce(
      "distop::contrastive::finish",
      Kokkos::RangePolicy<ExecSpace>(0, static_cast<std::int64_t>(vmax.extent(0))),
      KOKKOS_LAMBDA(const std::int64_t r, double& acc) {
        vlse(r) = vmax(r) + kernels::kmath::log(vsum(r));
        acc += vlse(r) - vpos(r);
      },
      total);
  return total;
}

// Overwrites the tile's logits s with w times the gradient of the loss terms of its rows with
// respect to them, and returns {sum g l', sum g} over the tile, where l' = l - bias: the gradients
// with respect to the log scale (l' is the scale times the similarity) and to the bias. NT-Xent
// and CLIP: g = w (e^(l - lse) - [positive]), 0 for the excluded key, exp in T; SigLIP:
// g = -w z sigmoid(-z l). `partial` holds at least 2 nq doubles (per-row partial sums).
template <class SView, class Space, class PView>
std::array<double, 2> tile_gradient(ContrastiveKind kind, const Tile& t, const SView& s,
                                    const RowStatViews<Space>& st, double w, double bias,
                                    const PView& partial) {
  using T = typename SView::non_const_value_type;
  const auto vlse = st.lse;
  const std::int64_t nj = t.nj, r0 = t.r0, i0 = t.i0, j0 = t.j0, n = t.n;
  const bool own = t.own;
  const bool siglip = kind == ContrastiveKind::siglip;
  bool done = false;
  if constexpr (host_rows::kApplies<typename SView::memory_space>) {
    if (kernels::host_kernels_enabled()) {
      T* p = s.data();
      double* pr = partial.data();
      const double* lse = vlse.data();
      Kokkos::parallel_for("distop::contrastive::gradient_host",
                           Kokkos::RangePolicy<ExecSpace>(0, t.nq), [=](const std::int64_t i) {
                             const TileKeys keys = tile_keys(kind, own, i0 + i, n, j0);
                             const std::int64_t pos = keys.pos, ex = keys.ex;
                             host_rows::gradient_row(kind, p + i * nj, nj, pos, ex,
                                                     siglip ? 0.0 : lse[r0 + i], w, bias,
                                                     pr + 2 * i);
                           });
      done = true;
    }
  }
  if (!done)
    Kokkos::parallel_for(
        "distop::contrastive::gradient", kernels::team_per_row(t.nq, "contrastive loss"),
        KOKKOS_LAMBDA(const kernels::TeamMember& team) {
          const std::int64_t i = team.league_rank();
          const std::int64_t base = i * nj;
          const TileKeys keys = tile_keys(kind, own, i0 + i, n, j0);
          const std::int64_t pos = keys.pos, ex = keys.ex;
          const T lse = siglip ? T(0) : static_cast<T>(vlse(r0 + i));
          double sum_gs = 0, sum_g = 0;
          for (std::int64_t j = team.team_rank(); j < nj; j += team.team_size()) {
            const double l = static_cast<double>(s(base + j));
            double g;
            if (siglip) {
              // d/dl of -log sigmoid(z l) = -z sigmoid(-z l)
              const double z = j == pos ? 1.0 : -1.0;
              const double x = -z * l;
              const double sig = x >= 0 ? 1.0 / (1.0 + kernels::kmath::exp(-x))
                                        : kernels::kmath::exp(x) / (1.0 + kernels::kmath::exp(x));
              g = -w * z * sig;
              sum_gs += g * (l - bias);
            } else {
              g = j == ex ? 0.0 : w * static_cast<double>(kernels::kmath::exp(s(base + j) - lse));
              if (j == pos) g -= w;
              sum_gs += g * l;
            }
            sum_g += g;
            s(base + j) = static_cast<T>(g);
          }
          if (team.team_size() > 1) {
            sum_gs = kernels::team_join_sum(team, sum_gs);
            sum_g = kernels::team_join_sum(team, sum_g);
          }
          Kokkos::single(Kokkos::PerTeam(team), [&]() {
            partial(2 * i) = sum_gs;
            partial(2 * i + 1) = sum_g;
          });
        });
  std::array<double, 2> sums = {0, 0};
  for (int k = 0; k < 2; ++k)
    Kokkos::parallel_reduce(
        "distop::contrastive::gradient_sums", Kokkos::RangePolicy<ExecSpace>(0, t.nq),
        KOKKOS_LAMBDA(const std::int64_t i, double& acc) { acc += partial(2 * i + k); }, sums[k]);
  return sums;
}

}  // namespace distop::loss::detail
