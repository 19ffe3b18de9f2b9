// bench_pack: the box kernels behind every data-movement operator (kernels::pack, unpack and
// copy_box), timed against memcpy of the same bytes between contiguous buffers.
//
// Run:  mpiexec.mpich -n 1 build/benchmarks/bench_pack [--csv] [--reps N] [--budget S]
//                                                      [--simd-cap BYTES]
//
// Boxes (float), each inside a larger row-major tensor, 64 KiB and more; "run" is the length of the
// contiguous pieces the box is made of (the trailing axes it covers whole merge into one):
//   2-D column blocks, as a [P, 1] -> [1, P] repartition at 2 ranks moves them (runs of 512 B to
//   4 KiB), a wide block, and one with short runs (128 B);
//   3-D blocks: whole trailing axes (8 KiB runs), a centred cube (128 B), an octant (256 B),
//   a half along the last axis (512 B), and a last-axis face two entries thick (8 B runs, what a
//   halo along the last axis moves).
// Kernels, each against a memcpy of box-many bytes from one contiguous buffer to another (the
// kernel's own contiguous buffer, where it has one, is one of them):
//   pack      box of the tensor -> contiguous buffer
//   unpack    contiguous buffer -> box of the tensor
//   copy_box  box of one tensor -> the same box of another (the local part of a repartition)
//   unpack+=  contiguous buffer added into the box (an adjoint's accumulate); its baseline is a
//             plain loop adding one contiguous buffer into another, not memcpy, compiled for the
//             widest vectors the CPU has (DISTOP_BENCH_VECTOR_CLONES), as distop's kernels are
// A second pairing times the same distop call against a hand-written loop over the same strided
// box (memcpy per contiguous run, trailing whole axes merged; += loop for unpack+=): loop_us, and
// vs_loop = loop_us / distop's median in that pairing (each pairing is timed on its own, as the
// two sides of a pair evict each other's data from cache alike). It separates the kernels' own
// overhead (vs_loop < 1) from what the strided layout costs any code (ratio < 0.8, vs_loop ~ 1).
// lines = the bytes of the 64-byte cache lines the box's runs touch in the tensor over the box's
// bytes: 1 where runs are whole lines, 8 for runs of 8 bytes, each in a line of its own (a kernel
// moving such a box brings `lines` times its bytes through the caches, where memcpy of the same
// bytes brings them once). GB/s = box bytes / median time. Timing: steady_clock around each call;
// distop and baseline repetitions interleaved, alternating which goes first; a warm-up of 3 to 10
// pairs (about 0.1 s), then --reps repetitions (default 1000), fewer where the warm-up predicts
// more than --budget seconds (default 0.25), never fewer than 50. Both sides run on buffers that
// stay allocated, so at the smaller sizes both work from cache; the contiguous ones are 64-byte
// aligned tensors, as the buffers distop's operators pack into. --simd-cap 32 (AVX2) or 16
// (portable) times distop's other kernel forms on a CPU that has wider vectors.
//
// Target (the pass column): ratio = distop GB/s / baseline GB/s >= 0.8.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "bench_util.hpp"
#include "distop/core/environment.hpp"
#include "distop/core/tensor.hpp"
#include "distop/kernels/box.hpp"

namespace {

namespace bench = distop::bench;
using distop::Box;
using distop::Shape;
using distop::Tensor;

constexpr double kTargetRatio = 0.8;

struct Settings {
  int reps = 1000;
  double budget_s = 0.25;
  bool csv = false;
};

struct BoxCase {
  Shape tensor;
  Box box;
};

struct Row {
  std::string kernel;
  std::string tensor;
  std::string box;
  std::int64_t bytes = 0;
  std::int64_t run = 0;
  double lines = 0;  // bytes of the cache lines the box touches in the tensor, per box byte
  int reps = 0;
  double distop_us = 0;
  double base_us = 0;
  double loop_us = 0;
  double distop_vs_loop_us = 0;  // distop's median in the pairing with the loop
  double distop_gbs() const { return static_cast<double>(bytes) / distop_us * 1e-3; }
  double base_gbs() const { return static_cast<double>(bytes) / base_us * 1e-3; }
  double ratio() const { return base_us / distop_us; }
  bool pass() const { return ratio() >= kTargetRatio; }
};

const bench::Table& table() {
  static const bench::Table t({{"kernel", 9, true},
                               {"tensor", 15, true},
                               {"box", 22, true},
                               {"bytes", 9},
                               {"run_B", 6},
                               {"lines", 5, false, 2},
                               {"distop_us", 10},
                               {"base_us", 9},
                               {"distop_GB/s", 11, false, 1},
                               {"base_GB/s", 9, false, 1},
                               {"ratio", 6, false, 3},
                               {"loop_us", 9},
                               {"vs_loop", 7, false, 3},
                               {"pass", 4, true, 0, 2},
                               {"reps", 5}});
  return t;
}

void print_row(const Settings& s, const Row& r) {
  if (s.csv) {
    std::printf("%s,\"%s\",\"%s\",%lld,%lld,%.3f,%.3f,%.4f,%.3f,%.4f\n", r.kernel.c_str(),
                r.tensor.c_str(), r.box.c_str(), static_cast<long long>(r.bytes),
                static_cast<long long>(r.run), r.distop_us, r.base_us, r.ratio(), r.loop_us,
                r.lines);
    std::fflush(stdout);
  } else {
    table().row({r.kernel, r.tensor, r.box, static_cast<long long>(r.bytes),
                 static_cast<long long>(r.run), r.lines, r.distop_us, r.base_us, r.distop_gbs(),
                 r.base_gbs(), r.ratio(), r.loop_us, r.loop_us / r.distop_vs_loop_us,
                 std::string(r.pass() ? "pass" : "FAIL"), static_cast<long long>(r.reps)});
  }
}

// The contiguous run length of a box in a tensor, in elements (as the kernels see it).
std::int64_t run_of(const Shape& shape, const Box& box) {
  std::int64_t run = 1;
  for (int a = shape.rank() - 1; a >= 0; --a) {
    run *= box.extent[static_cast<std::size_t>(a)];
    if (box.extent[static_cast<std::size_t>(a)] != shape[a]) break;
  }
  return run;
}

// A hand-written loop over the same box: for each run (the merged trailing axes, as run_of), one
// call f(tensor offset, packed offset). Boxes of rank <= 3 only (all cases here).
template <class F>
void hand_loop(const Shape& shape, const Box& box, F&& f) {
  const int rank = shape.rank();
  int inner = rank;
  while (inner > 0) {
    --inner;
    if (box.extent[static_cast<std::size_t>(inner)] != shape[inner]) break;
  }
  std::int64_t e[2] = {1, 1}, st[2] = {0, 0};
  const auto strides = shape.strides();
  std::int64_t base = 0;
  for (int a = 0; a < rank; ++a) base += box.offset[static_cast<std::size_t>(a)] * strides[a];
  for (int a = 0; a < inner; ++a) {
    e[2 - inner + a] = box.extent[static_cast<std::size_t>(a)];
    st[2 - inner + a] = strides[a];
  }
  std::int64_t pos = 0;
  const std::int64_t run = run_of(shape, box);
  for (std::int64_t i = 0; i < e[0]; ++i)
    for (std::int64_t j = 0; j < e[1]; ++j, pos += run) f(base + i * st[0] + j * st[1], pos, run);
}

// out[0 .. n) += in[0 .. n): the plain loop of the unpack+= baselines.
DISTOP_BENCH_VECTOR_CLONES
void add_into(float* __restrict out, const float* __restrict in, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] += in[i];
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (int a = 0; a < s.rank(); ++a) {
    if (a) out += ',';
    out += std::to_string(s[a]);
  }
  return out + "]";
}

std::vector<Row> bench_box(const Settings& s, const BoxCase& c) {
  const Box& box = c.box;
  const std::int64_t n = box.numel();
  const auto bytes = static_cast<std::size_t>(n) * sizeof(float);
  auto src = Tensor<float>::uninitialized(c.tensor);
  auto dst = Tensor<float>::uninitialized(c.tensor);
  src.fill(1.0f);
  dst.fill(0.0f);
  // The contiguous buffers are tensors too, 64-byte aligned as the buffers distop's operators
  // pack into and unpack from.
  auto buf = Tensor<float>::uninitialized(Shape{n});
  auto a = Tensor<float>::uninitialized(Shape{n});
  auto b = Tensor<float>::uninitialized(Shape{n});
  buf.fill(1.0f);
  a.fill(1.0f);
  b.fill(0.0f);

  // The baselines share the contiguous side with the kernel they time, where it has one.
  auto memcpy_to_buf = [&] { std::memcpy(buf.data(), a.data(), bytes); };
  auto memcpy_from_buf = [&] { std::memcpy(b.data(), buf.data(), bytes); };
  auto memcpy_ab = [&] { std::memcpy(b.data(), a.data(), bytes); };
  float* const sp = src.data();
  float* const dp = dst.data();
  float* const bp = buf.data();
  constexpr auto fs = sizeof(float);
  auto loop_pack = [&] {
    hand_loop(c.tensor, box, [&](std::int64_t off, std::int64_t pos, std::int64_t run) {
      std::memcpy(bp + pos, sp + off, static_cast<std::size_t>(run) * fs);
    });
  };
  auto loop_unpack = [&] {
    hand_loop(c.tensor, box, [&](std::int64_t off, std::int64_t pos, std::int64_t run) {
      std::memcpy(dp + off, bp + pos, static_cast<std::size_t>(run) * fs);
    });
  };
  auto loop_copy = [&] {
    hand_loop(c.tensor, box, [&](std::int64_t off, std::int64_t, std::int64_t run) {
      std::memcpy(dp + off, sp + off, static_cast<std::size_t>(run) * fs);
    });
  };
  auto loop_add = [&] {
    hand_loop(c.tensor, box, [&](std::int64_t off, std::int64_t pos, std::int64_t run) {
      add_into(dp + off, bp + pos, run);
    });
  };
  auto add_from_buf = [&] { add_into(b.data(), buf.data(), n); };
  struct K {
    const char* name;
    std::function<void()> distop;
    std::function<void()> base;
    std::function<void()> loop;
  };
  const std::vector<K> kernels{
      {"pack", [&] { distop::kernels::pack(src, box, buf.data()); }, memcpy_to_buf, loop_pack},
      {"unpack", [&] { distop::kernels::unpack(buf.data(), box, dst); }, memcpy_from_buf,
       loop_unpack},
      {"copy_box", [&] { distop::kernels::copy_box(src, box, dst, box); }, memcpy_ab, loop_copy},
      {"unpack+=", [&] { distop::kernels::unpack(buf.data(), box, dst, true); }, add_from_buf,
       loop_add},
  };
  // The traffic the box's layout implies: every 64-byte line a run touches comes in whole (the
  // tensors are 64-byte aligned), so a box of runs shorter than a line moves more than its bytes.
  constexpr std::int64_t kLine = 64;
  std::int64_t line_bytes = 0;
  hand_loop(c.tensor, box, [&](std::int64_t off, std::int64_t, std::int64_t run) {
    const std::int64_t first = off * static_cast<std::int64_t>(fs);
    const std::int64_t end = first + run * static_cast<std::int64_t>(fs);
    line_bytes += ((end + kLine - 1) / kLine - first / kLine) * kLine;
  });
  const double lines = static_cast<double>(line_bytes) / static_cast<double>(bytes);
  std::vector<Row> rows;
  for (const auto& k : kernels) {
    auto run_a = [&k] { return bench::time_one(k.distop); };
    auto run_b = [&k] { return bench::time_one(k.base); };
    auto run_l = [&k] { return bench::time_one(k.loop); };
    const auto m = bench::measure_pairs(
        [&](int reps) { return bench::interleave(reps, run_a, run_b); }, s.reps, s.budget_s);
    const auto l = bench::measure_pairs(
        [&](int reps) { return bench::interleave(reps, run_a, run_l); }, s.reps, s.budget_s);
    rows.push_back(Row{k.name, shape_str(c.tensor), box.str(), static_cast<std::int64_t>(bytes),
                       run_of(c.tensor, box) * static_cast<std::int64_t>(sizeof(float)), lines,
                       m.reps, m.median_a_us(), m.median_b_us(), l.median_b_us(), l.median_a_us()});
    print_row(s, rows.back());
  }
  return rows;
}

int run(const Settings& s) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 1) {
    std::fprintf(stderr, "bench_pack times one process; run it with mpiexec -n 1\n");
    return 1;
  }
  if constexpr (!distop::kHostAccessible) {
    std::fprintf(stderr, "bench_pack compares against host memcpy; tensors here live on a GPU\n");
    return 1;
  }
  const std::vector<BoxCase> cases{
      // 2-D: a [2, 1] -> [1, 2] repartition's column block at 256 KiB, 4 MiB and 16 MiB tensors.
      {Shape{128, 256}, Box{{0, 128}, {128, 128}}},
      {Shape{512, 1024}, Box{{0, 512}, {512, 512}}},
      {Shape{1024, 2048}, Box{{0, 1024}, {1024, 1024}}},
      // 2-D: a block of a wider tensor, and short runs.
      {Shape{1024, 1024}, Box{{256, 256}, {512, 256}}},
      {Shape{4096, 64}, Box{{0, 0}, {4096, 32}}},
      // 3-D.
      {Shape{64, 64, 64}, Box{{0, 0, 0}, {32, 32, 64}}},
      {Shape{64, 64, 64}, Box{{16, 16, 16}, {32, 32, 32}}},
      {Shape{128, 128, 128}, Box{{0, 0, 0}, {64, 64, 64}}},
      {Shape{32, 256, 256}, Box{{0, 0, 0}, {32, 256, 128}}},
      {Shape{128, 128, 128}, Box{{0, 0, 126}, {128, 128, 2}}},
  };
  if (s.csv) {
    std::printf("kernel,tensor,box,bytes,run_bytes,distop_us,base_us,ratio,loop_us,lines\n");
  } else {
    std::printf(
        "# bench_pack: float boxes, 1 process; baseline memcpy of the box's bytes between "
        "contiguous buffers (unpack+=: a contiguous add loop); distop's vector kernels: %d-byte\n",
        distop::kernels::host_simd_bytes());
    std::printf(
        "# GB/s = box bytes / median time; ratio = distop / baseline GB/s; pass: ratio >= "
        "%.2f\n",
        kTargetRatio);
    table().header();
  }
  int rows = 0;
  int passed = 0;
  // Per kernel, in the order of the table: pack and unpack (box <-> contiguous buffer) are the
  // kernels the target names; copy_box (box -> box) and unpack+= are timed against the same
  // contiguous baselines.
  std::vector<std::pair<std::string, std::pair<int, int>>> by_kernel;
  for (const auto& c : cases) {
    for (const auto& r : bench_box(s, c)) {
      ++rows;
      if (r.pass()) ++passed;
      auto k = std::find_if(by_kernel.begin(), by_kernel.end(),
                            [&r](const auto& e) { return e.first == r.kernel; });
      if (k == by_kernel.end()) k = by_kernel.insert(by_kernel.end(), {r.kernel, {0, 0}});
      ++k->second.second;
      if (r.pass()) ++k->second.first;
    }
  }
  if (!s.csv) {
    std::printf("# %d of %d rows pass (", passed, rows);
    for (std::size_t i = 0; i < by_kernel.size(); ++i)
      std::printf("%s%s %d of %d", i ? ", " : "", by_kernel[i].first.c_str(),
                  by_kernel[i].second.first, by_kernel[i].second.second);
    std::printf(")\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  distop::Environment env(argc, argv);
  Settings s;
  CLI::App app{"Times distop's box kernels against memcpy"};
  bench::add_repetition_options(app, s.reps, s.budget_s, /*per_size=*/false);
  app.add_flag("--csv", s.csv,
               "print kernel,tensor,box,bytes,run_bytes,distop_us,base_us,ratio,loop_us,lines "
               "rows");
  bench::add_simd_cap_option(app);
  if (const auto code = bench::parse_args(app, argc, argv)) return *code;
  return bench::run_or_abort([&] { return run(s); });
}
