// bench_movement: distop's data-movement operators (Gather, Scatter, AllGather, ReduceScatter,
// Repartition, HaloExchange), forward and adjoint, timed against the raw MPI that moves the same
// bytes.
//
// Run:  mpiexec.mpich -n 2 build/benchmarks/bench_movement [--csv] [--reps N] [--max-bytes B]
//                                                          [--step 2|4] [--only OP] [--prototypes]
//
// Sizes: float tensors of 8 B to --max-bytes (16 MiB by default; 8 B, then the powers of 4, or
// every power of 2 with --step 2); "bytes" is the whole tensor's size (for HaloExchange: the ghost
// volume each rank receives). P = the ranks of MPI_COMM_WORLD (the targets are set at P = 2).
// Cases, with the raw baseline of each:
//   Gather         forward  [n] split over [P] -> whole on rank 0      raw: MPI_Gatherv to 0
//   Gather         adjoint  (Scatter)                                  raw: MPI_Scatterv from 0
//   Scatter        forward  whole on rank 0 -> [n] split over [P]      raw: MPI_Scatterv from 0
//   Scatter        adjoint  (Gather, summing)                          raw: MPI_Gatherv to 0
//   AllGather      forward  [n] split over [P] -> whole on every rank  raw: MPI_Allgatherv
//   AllGather      adjoint  (ReduceScatter)                            raw: MPI_Reduce_scatter(SUM)
//   ReduceScatter  forward  whole on every rank -> summed blocks       raw: MPI_Reduce_scatter(SUM)
//   ReduceScatter  adjoint  (AllGather)                                raw: MPI_Allgatherv
//   Repartition    forward  [R, C] on a [P, 1] grid -> on a [1, P] grid (R x C ~ square; rows
//                           and columns balanced)                      raw: pack x +
//                                                                           MPI_Alltoallv into y
//   Repartition    adjoint  [1, P] -> [P, 1]                           raw: MPI_Alltoallv from
//                                                                           y + unpack into x
//   HaloExchange   forward  [2P, C] split by rows over [P, 1] (2 interior rows each), ghost width 1
//                           on each inner side (a 3-tap window, padding 1, along the rows); C =
//                           bytes / 4                                  raw: copy x to y +
//                                                                           2 x MPI_Sendrecv
//   HaloExchange   adjoint                                             raw: copy y to x, 2 x
//                           MPI_Sendrecv of the ghosts to a scratch buffer, add into the owner's
//                           rows, zero the ghosts
// The Repartition baseline counts the packing a user of MPI_Alltoallv has to do, and no more: the
// forward packs the rank's [rows, C / P] column blocks of x, one per destination and its own
// included, into one send buffer (a memcpy per row) and calls MPI_Alltoallv straight into y (the
// blocks of y, one per source, are whole row ranges, contiguous: no unpacking); the adjoint calls
// MPI_Alltoallv from y into that buffer and unpacks it into x's column blocks (a memcpy per row).
// The buffer is allocated once, outside the timed region. distop's HaloExchange is out of place
// (y = H x copies the interior as well), so its baseline copies the padded array too (one memcpy)
// before the two MPI_Sendrecv calls.
// --prototypes adds rows against leaner baselines, for comparison only:
//   Repartition:a2a   MPI_Alltoallv alone, the x side packed beforehand (no packing counted)
//   HaloExchange:sr   the two MPI_Sendrecv calls alone (no copy of the interior, in place)
//
// The raw calls run on a duplicate of MPI_COMM_WORLD, on the very buffers distop's tensors own
// (receives into a distop tensor's storage wherever the data lands contiguously), so both sides
// see the same memory. Inputs and outputs are separate tensors, so values never grow.
//
// Timing rule (as bench_collectives): every repetition starts with an MPI_Barrier; each rank times
// its own call with MPI_Wtime; the repetition's time is the MAXIMUM OVER THE RANKS (one
// MPI_Allreduce(MAX) after the loop, outside the timed region); the table reports the median, in
// microseconds. distop and raw repetitions are interleaved, alternating which goes first. After a
// warm-up of 3 to 10 pairs (about 0.1 s), each size runs --reps repetitions (default 1000); sizes
// of 64 KiB and more run fewer where the warm-up predicts more than --budget seconds (default
// 0.25), but never fewer than 50.
//
// Targets (the pass column): distop / raw <= 1.05 at >= 64 KiB; distop <= raw + 2 us below.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench_mpi.hpp"
#include "distop/comm/mpi.hpp"
#include "distop/core/environment.hpp"
#include "distop/dist/decomposition.hpp"
#include "distop/dist/dist_tensor.hpp"
#include "distop/dist/partition.hpp"
#include "distop/dist/tensor_space.hpp"
#include "distop/ops/all_gather.hpp"
#include "distop/ops/gather.hpp"
#include "distop/ops/reduce_scatter.hpp"
#include "distop/ops/scatter.hpp"
#include "distop/ops/halo_exchange.hpp"
#include "distop/ops/repartition.hpp"

namespace {

namespace bench = distop::bench;
using distop::DistTensor;
using distop::Partition;
using distop::Shape;
using distop::TensorSpace;

struct Settings {
  int reps = 1000;
  double budget_s = 0.25;
  std::int64_t max_bytes = 16 << 20;
  int step = 4;
  bool csv = false;
  bool prototypes = false;
  std::vector<std::string> only;  // op names to run; empty: all
};

using bench::Case;
using bench::fill;
using bench::kLargeBytes;
using bench::kLargeRatio;
using bench::kSmallSlackUs;
using bench::Row;

Row measure(MPI_Comm comm, const Settings& s, const Case& c, std::int64_t bytes) {
  return bench::measure_row(comm, s.reps, s.budget_s, c, bytes);
}
void print_row(const Settings& s, const Row& r) { bench::print_row(s.csv, r); }
const bench::Table& table() { return bench::mpi_table(); }

// MPI's int counts and displacements of a balanced split of n over p.
struct Counts {
  std::vector<int> count, displ;
};
Counts balanced_counts(std::int64_t n, int p) {
  const auto b = distop::balanced_bounds(n, p);
  Counts c;
  for (int i = 0; i < p; ++i) {
    c.count.push_back(static_cast<int>(b[i + 1] - b[i]));
    c.displ.push_back(static_cast<int>(b[i]));
  }
  return c;
}

// Gather, Scatter, AllGather, ReduceScatter of a 1-D tensor of n floats split over [P].
void add_collective_cases(std::vector<Case>& cases, std::vector<std::shared_ptr<void>>& keep,
                          MPI_Comm rc, std::int64_t n) {
  int rank = 0, size = 0;
  MPI_Comm_rank(rc, &rank);
  MPI_Comm_size(rc, &size);
  const TensorSpace split(Shape{n}, Partition::world(Shape{size}));
  struct State {
    distop::Gather<float> gather;
    distop::Scatter<float> scatter;
    distop::AllGather<float> all_gather;
    distop::ReduceScatter<float> reduce_scatter;
    DistTensor<float> part_in, part_out, root_in, root_out, full_in, full_out;
    Counts counts;
    State(const TensorSpace& split, std::int64_t n, int size)
        : gather(split, 0),
          scatter(split, 0),
          all_gather(split, {0}),
          reduce_scatter(split, {0}),
          part_in(split),
          part_out(split),
          root_in(gather.range()),
          root_out(gather.range()),
          full_in(all_gather.range()),
          full_out(all_gather.range()),
          counts(balanced_counts(n, size)) {
      fill(part_in, 1.0f);
      fill(root_in, 1.0f);
      fill(full_in, 1.0f);
    }
  };
  auto st = std::make_shared<State>(split, n, size);
  keep.push_back(st);
  State& s = *st;
  const int mine = s.counts.count[static_cast<std::size_t>(rank)];
  auto gatherv = [&s, rc, mine] {
    DISTOP_MPI_CHECK(MPI_Gatherv(s.part_in.data(), mine, MPI_FLOAT, s.root_out.data(),
                                 s.counts.count.data(), s.counts.displ.data(), MPI_FLOAT, 0, rc),
                     "bench");
  };
  auto scatterv = [&s, rc, mine] {
    DISTOP_MPI_CHECK(MPI_Scatterv(s.root_in.data(), s.counts.count.data(), s.counts.displ.data(),
                                  MPI_FLOAT, s.part_out.data(), mine, MPI_FLOAT, 0, rc),
                     "bench");
  };
  auto allgatherv = [&s, rc, mine] {
    DISTOP_MPI_CHECK(MPI_Allgatherv(s.part_in.data(), mine, MPI_FLOAT, s.full_out.data(),
                                    s.counts.count.data(), s.counts.displ.data(), MPI_FLOAT, rc),
                     "bench");
  };
  auto reduce_scatter = [&s, rc] {
    DISTOP_MPI_CHECK(MPI_Reduce_scatter(s.full_in.data(), s.part_out.data(), s.counts.count.data(),
                                        MPI_FLOAT, MPI_SUM, rc),
                     "bench");
  };
  cases.push_back(
      {"Gather", "forward", [&s] { s.gather.forward(s.part_in, s.root_out); }, gatherv});
  cases.push_back(
      {"Gather", "adjoint", [&s] { s.gather.adjoint(s.root_in, s.part_out); }, scatterv});
  cases.push_back(
      {"Scatter", "forward", [&s] { s.scatter.forward(s.root_in, s.part_out); }, scatterv});
  cases.push_back(
      {"Scatter", "adjoint", [&s] { s.scatter.adjoint(s.part_in, s.root_out); }, gatherv});
  cases.push_back(
      {"AllGather", "forward", [&s] { s.all_gather.forward(s.part_in, s.full_out); }, allgatherv});
  cases.push_back({"AllGather", "adjoint", [&s] { s.all_gather.adjoint(s.full_in, s.part_out); },
                   reduce_scatter});
  cases.push_back({"ReduceScatter", "forward",
                   [&s] { s.reduce_scatter.forward(s.full_in, s.part_out); }, reduce_scatter});
  cases.push_back({"ReduceScatter", "adjoint",
                   [&s] { s.reduce_scatter.adjoint(s.part_in, s.full_out); }, allgatherv});
}

// Repartition of an [R, C] tensor (R * C = n, R the power of 2 nearest sqrt(n) from above) from a
// [P, 1] to a [1, P] grid, if both axes can be split P ways.
void add_repartition_cases(std::vector<Case>& cases, std::vector<std::shared_ptr<void>>& keep,
                           MPI_Comm rc, std::int64_t n, bool prototypes) {
  int rank = 0, size = 0;
  MPI_Comm_rank(rc, &rank);
  MPI_Comm_size(rc, &size);
  std::int64_t rows = 1;
  while (rows * rows < n) rows *= 2;
  const std::int64_t cols = n / rows;
  if (rows * cols != n || rows < size || cols < size) return;
  const TensorSpace by_rows(Shape{rows, cols}, Partition::world(Shape{size, 1}));
  const TensorSpace by_cols(Shape{rows, cols}, Partition::world(Shape{1, size}));
  struct State {
    distop::Repartition<float> op;
    DistTensor<float> x_in, x_out, y_in, y_out;
    std::vector<float> send;  // the baseline's packed buffer
    std::vector<std::int64_t> rb, cb;
    // Forward Alltoallv: counts and displacements by peer (the adjoint swaps them).
    std::vector<int> scount, sdispl, rcount, rdispl;
    State(const TensorSpace& a, const TensorSpace& b)
        : op(a, b), x_in(a), x_out(a), y_in(b), y_out(b) {
      fill(x_in, 1.0f);
      fill(y_in, 1.0f);
    }
  };
  auto st = std::make_shared<State>(by_rows, by_cols);
  keep.push_back(st);
  State& s = *st;
  s.rb = distop::balanced_bounds(rows, size);
  s.cb = distop::balanced_bounds(cols, size);
  const auto me = static_cast<std::size_t>(rank);
  const std::int64_t my_rows = s.rb[me + 1] - s.rb[me];
  const std::int64_t my_cols = s.cb[me + 1] - s.cb[me];
  std::int64_t so = 0, ro = 0;
  for (std::size_t q = 0; q < static_cast<std::size_t>(size); ++q) {
    const auto sc = my_rows * (s.cb[q + 1] - s.cb[q]);
    const auto rcn = (s.rb[q + 1] - s.rb[q]) * my_cols;
    s.scount.push_back(static_cast<int>(sc));
    s.sdispl.push_back(static_cast<int>(so));
    s.rcount.push_back(static_cast<int>(rcn));
    s.rdispl.push_back(static_cast<int>(ro));
    so += sc;
    ro += rcn;
  }
  s.send.resize(static_cast<std::size_t>(so));
  const int p = size;
  // x (rows [rb[me], rb[me+1]), all columns) <-> the packed buffer ordered by destination q, each
  // block [my_rows, cols of q] row-major.
  auto pack_x = [&s, p, my_rows, cols](const float* x, float* buf) {
    for (int q = 0; q < p; ++q) {
      const auto c0 = s.cb[static_cast<std::size_t>(q)];
      const auto w = s.cb[static_cast<std::size_t>(q) + 1] - c0;
      float* out = buf + s.sdispl[static_cast<std::size_t>(q)];
      for (std::int64_t i = 0; i < my_rows; ++i)
        std::memcpy(out + i * w, x + i * cols + c0, static_cast<std::size_t>(w) * sizeof(float));
    }
  };
  auto unpack_x = [&s, p, my_rows, cols](const float* buf, float* x) {
    for (int q = 0; q < p; ++q) {
      const auto c0 = s.cb[static_cast<std::size_t>(q)];
      const auto w = s.cb[static_cast<std::size_t>(q) + 1] - c0;
      const float* in = buf + s.sdispl[static_cast<std::size_t>(q)];
      for (std::int64_t i = 0; i < my_rows; ++i)
        std::memcpy(x + i * cols + c0, in + i * w, static_cast<std::size_t>(w) * sizeof(float));
    }
  };
  // y (all rows, columns [cb[me], cb[me+1])) needs no packing: the block from (or to) source r is
  // its rows [rb[r], rb[r+1]), contiguous in y, so MPI_Alltoallv reads or writes y in place.
  auto a2a_forward_into_y = [&s, rc] {
    DISTOP_MPI_CHECK(MPI_Alltoallv(s.send.data(), s.scount.data(), s.sdispl.data(), MPI_FLOAT,
                                   s.y_out.data(), s.rcount.data(), s.rdispl.data(), MPI_FLOAT, rc),
                     "bench");
  };
  auto a2a_reverse_from_y = [&s, rc] {
    DISTOP_MPI_CHECK(MPI_Alltoallv(s.y_in.data(), s.rcount.data(), s.rdispl.data(), MPI_FLOAT,
                                   s.send.data(), s.scount.data(), s.sdispl.data(), MPI_FLOAT, rc),
                     "bench");
  };
  cases.push_back({"Repartition", "forward", [&s] { s.op.forward(s.x_in, s.y_out); },
                   [&s, pack_x, a2a_forward_into_y] {
                     pack_x(s.x_in.data(), s.send.data());
                     a2a_forward_into_y();
                   }});
  cases.push_back({"Repartition", "adjoint", [&s] { s.op.adjoint(s.y_in, s.x_out); },
                   [&s, unpack_x, a2a_reverse_from_y] {
                     a2a_reverse_from_y();
                     unpack_x(s.send.data(), s.x_out.data());
                   }});
  if (prototypes) {
    pack_x(s.x_in.data(), s.send.data());
    cases.push_back({"Repartition:a2a", "forward", [&s] { s.op.forward(s.x_in, s.y_out); },
                     a2a_forward_into_y});
    cases.push_back({"Repartition:a2a", "adjoint", [&s] { s.op.adjoint(s.y_in, s.x_out); },
                     a2a_reverse_from_y});
  }
}

// Halo exchange of a [2P, C] tensor split by rows over [P, 1]: ghost width 1 on inner sides.
void add_halo_cases(std::vector<Case>& cases, std::vector<std::shared_ptr<void>>& keep, MPI_Comm rc,
                    std::int64_t cols, bool prototypes) {
  int rank = 0, size = 0;
  MPI_Comm_rank(rc, &rank);
  MPI_Comm_size(rc, &size);
  const TensorSpace interior(Shape{2 * size, cols}, Partition::world(Shape{size, 1}));
  const std::vector<distop::ConvWindow> windows{{3, 1, 1, 1}, {1, 1, 0, 1}};
  struct State {
    distop::HaloExchange<float> op;
    DistTensor<float> x_in, x_out, y_in, y_out;
    std::vector<float> scratch;
    State(const TensorSpace& interior, const std::vector<distop::ConvWindow>& w)
        : op(interior, w),
          x_in(op.domain()),
          x_out(op.domain()),
          y_in(op.domain()),
          y_out(op.domain()) {
      fill(x_in, 1.0f);
      fill(y_in, 1.0f);
    }
  };
  auto st = std::make_shared<State>(interior, windows);
  keep.push_back(st);
  State& s = *st;
  const auto& spec = s.op.spec()[0];
  const auto me = static_cast<std::size_t>(rank);
  const std::int64_t top = spec[me].left;      // ghost rows above the interior
  const std::int64_t bottom = spec[me].right;  // ghost rows below
  const std::int64_t inner = interior.local_shape()[0];
  // Rows this rank owns that its neighbours hold as ghosts.
  const std::int64_t to_up = rank > 0 ? spec[me - 1].right : 0;
  const std::int64_t to_down = rank + 1 < size ? spec[me + 1].left : 0;
  const int up = rank > 0 ? rank - 1 : MPI_PROC_NULL;
  const int down = rank + 1 < size ? rank + 1 : MPI_PROC_NULL;
  const auto total = static_cast<std::size_t>(s.x_in.local_numel());
  s.scratch.resize(static_cast<std::size_t>(std::max(to_up, to_down) * cols));
  auto c = [cols](std::int64_t r) { return static_cast<int>(r * cols); };
  auto exchange = [rc, c, up, down, top, bottom, inner, to_up, to_down](float* y) {
    // My first rows up, my bottom ghosts from below; then my last rows down, my top ghosts from
    // above.
    DISTOP_MPI_CHECK(MPI_Sendrecv(y + c(top), c(to_up), MPI_FLOAT, up, 7, y + c(top + inner),
                                  c(bottom), MPI_FLOAT, down, 7, rc, MPI_STATUS_IGNORE),
                     "bench");
    DISTOP_MPI_CHECK(MPI_Sendrecv(y + c(top + inner - to_down), c(to_down), MPI_FLOAT, down, 8, y,
                                  c(top), MPI_FLOAT, up, 8, rc, MPI_STATUS_IGNORE),
                     "bench");
  };
  auto reverse = [&s, rc, c, up, down, top, bottom, inner, to_up, to_down, cols](float* x) {
    float* const buf = s.scratch.data();
    auto add = [buf](float* into, std::int64_t count) {
      for (std::int64_t i = 0; i < count; ++i) into[i] += buf[i];
    };
    // My bottom ghosts down, the mirror of my top rows from above... and the other way round.
    DISTOP_MPI_CHECK(MPI_Sendrecv(x + c(top + inner), c(bottom), MPI_FLOAT, down, 9, buf, c(to_up),
                                  MPI_FLOAT, up, 9, rc, MPI_STATUS_IGNORE),
                     "bench");
    add(x + c(top), to_up * cols);
    DISTOP_MPI_CHECK(MPI_Sendrecv(x, c(top), MPI_FLOAT, up, 10, buf, c(to_down), MPI_FLOAT, down,
                                  10, rc, MPI_STATUS_IGNORE),
                     "bench");
    add(x + c(top + inner - to_down), to_down * cols);
    std::fill(x, x + c(top), 0.0f);
    std::fill(x + c(top + inner), x + c(top + inner + bottom), 0.0f);
  };
  cases.push_back({"HaloExchange", "forward", [&s] { s.op.forward(s.x_in, s.y_out); },
                   [&s, exchange, total] {
                     std::memcpy(s.y_out.data(), s.x_in.data(), total * sizeof(float));
                     exchange(s.y_out.data());
                   }});
  cases.push_back({"HaloExchange", "adjoint", [&s] { s.op.adjoint(s.y_in, s.x_out); },
                   [&s, reverse, total] {
                     std::memcpy(s.x_out.data(), s.y_in.data(), total * sizeof(float));
                     reverse(s.x_out.data());
                   }});
  if (prototypes) {
    cases.push_back({"HaloExchange:sr", "forward", [&s] { s.op.forward(s.x_in, s.y_out); },
                     [&s, exchange] { exchange(s.y_out.data()); }});
  }
}

bool wanted(const Settings& s, const std::string& op) {
  if (s.only.empty()) return true;
  const auto base = op.substr(0, op.find(':'));
  return std::find(s.only.begin(), s.only.end(), base) != s.only.end();
}

int run(const Settings& s) {
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2) {
    if (rank == 0) std::fprintf(stderr, "bench_movement needs at least 2 ranks\n");
    return 1;
  }
  auto raw = distop::comm::Comm::duplicate(MPI_COMM_WORLD);
  const MPI_Comm rc = raw.get();

  if (rank == 0) {
    if (s.csv) {
      std::printf("op,direction,bytes,ranks,distop_us,mpi_us,ratio\n");
    } else {
      std::printf("# bench_movement: %d ranks, float tensors, %s\n", size,
                  bench::mpi_library_version().c_str());
      std::printf(
          "# time per repetition = max over ranks (barrier before each); median over reps\n");
      std::printf("# pass: ratio <= %.2f at >= %lld B; distop <= mpi + %.0f us below\n",
                  kLargeRatio, static_cast<long long>(kLargeBytes), kSmallSlackUs);
      table().header();
    }
  }

  int rows = 0;
  int passed = 0;
  for (const auto bytes : bench::size_ladder(s.max_bytes, s.step)) {
    const std::int64_t n = bytes / static_cast<std::int64_t>(sizeof(float));
    std::vector<Case> all;
    std::vector<std::shared_ptr<void>> keep;  // the operators and tensors of this size
    if (n >= size) add_collective_cases(all, keep, rc, n);
    add_repartition_cases(all, keep, rc, n, s.prototypes);
    add_halo_cases(all, keep, rc, n, s.prototypes);
    for (const auto& c : all) {
      if (!wanted(s, c.op)) continue;
      const Row r = measure(rc, s, c, bytes);
      ++rows;
      if (r.pass()) ++passed;
      if (rank == 0) print_row(s, r);
    }
  }
  if (rank == 0 && !s.csv) std::printf("# %d of %d rows pass\n", passed, rows);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  distop::Environment env(argc, argv);
  Settings s;
  CLI::App app{"Times distop's data-movement operators against raw MPI"};
  bench::add_repetition_options(app, s.reps, s.budget_s, /*per_size=*/true);
  bench::add_size_ladder_options(app, s.max_bytes, s.step);
  app.add_option("--only", s.only,
                 "operators to time (Gather Scatter AllGather ReduceScatter Repartition "
                 "HaloExchange; default all)");
  app.add_flag("--csv", s.csv, "print op,direction,bytes,ranks,distop_us,mpi_us,ratio rows");
  app.add_flag("--prototypes", s.prototypes, "add rows against leaner baselines (see the source)");
  if (const auto code = bench::parse_args(app, argc, argv)) return *code;
  return bench::run_or_abort([&] { return run(s); });
}
