// The contrastive_loss program: its loss and assembled gradients at 1, 2 and 3 ranks against the
// definitions computed here (the loss written out naively, gradients by central differences), in
// F64 and F32, and clear errors for bad files and options.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "distop/io/safetensors.hpp"
#include "run_example.hpp"
#include "temp_dir.hpp"

namespace {

using distop::Shape;
using distop::io::SafetensorsFile;
using distop::io::TensorEntry;
using distop::test::expect_clean_failure;
using distop::test::Outcome;
using distop::test::TempDir;

constexpr std::int64_t kB = 7, kD = 4;

Outcome run(int ranks, const std::string& args) {
  return distop::test::run_example(DISTOP_MPIEXEC, DISTOP_CONTRASTIVE_LOSS, ranks, args);
}

// The losses on rows (normalised here), with a = x[0, B*D), b = x[B*D, 2*B*D), then the log scale
// and the bias.
double naive(const std::string& loss, const std::vector<double>& x, double tau) {
  auto row = [&](int set, std::int64_t i) {
    std::vector<double> r(x.begin() + (set * kB + i) * kD, x.begin() + (set * kB + i + 1) * kD);
    double n = 0;
    for (double e : r) n += e * e;
    for (double& e : r) e /= std::sqrt(n);
    return r;
  };
  auto dot = [](const std::vector<double>& u, const std::vector<double>& v) {
    double s = 0;
    for (std::size_t k = 0; k < u.size(); ++k) s += u[k] * v[k];
    return s;
  };
  const double t = x[2 * kB * kD], bias = x[2 * kB * kD + 1];
  double total = 0;
  if (loss == "ntxent") {
    for (std::int64_t i = 0; i < 2 * kB; ++i) {
      const auto zi = row(int(i / kB), i % kB);
      double den = 0;
      for (std::int64_t j = 0; j < 2 * kB; ++j)
        if (j != i) den += std::exp(dot(zi, row(int(j / kB), j % kB)) / tau);
      const std::int64_t pos = (i + kB) % (2 * kB);
      total += std::log(den) - dot(zi, row(int(pos / kB), pos % kB)) / tau;
    }
    return total / (2 * kB);
  }
  const double s = std::exp(loss == "clip" ? std::min(t, std::log(100.0)) : t);
  for (std::int64_t i = 0; i < kB; ++i) {
    double dr = 0, dc = 0;
    for (std::int64_t j = 0; j < kB; ++j) {
      const double lij = s * dot(row(0, i), row(1, j)), lji = s * dot(row(0, j), row(1, i));
      if (loss == "clip") {
        dr += std::exp(lij);
        dc += std::exp(lji);
      } else {
        total += std::log1p(std::exp(-(i == j ? 1 : -1) * (lij + bias)));
      }
    }
    if (loss == "clip")
      total += 0.5 * (std::log(dr) + std::log(dc)) - s * dot(row(0, i), row(1, i));
  }
  return total / kB;
}

std::vector<double> inputs() {
  std::vector<double> x(2 * kB * kD + 2);
  for (std::size_t k = 0; k < 2 * kB * kD; ++k) x[k] = std::sin(1.7 * k + 0.3) + 0.1 * (k % 3);
  x[2 * kB * kD] = 1.2;       // logit_scale
  x[2 * kB * kD + 1] = -1.5;  // logit_bias
  return x;
}

template <class T>
void write_input(const std::string& path, const std::vector<double>& x, bool scale = true,
                 bool bias = true, Shape b_shape = Shape{kB, kD}) {
  std::vector<T> v(x.begin(), x.end());
  std::vector<TensorEntry> e = {{"a", Shape{kB, kD}, v.data()}, {"b", b_shape, v.data() + kB * kD}};
  if (scale) e.emplace_back("logit_scale", Shape{1}, v.data() + 2 * kB * kD);
  if (bias) e.emplace_back("logit_bias", Shape{1}, v.data() + 2 * kB * kD + 1);
  distop::io::write_safetensors(path, e);
}

void check_output(const std::string& path, const std::string& loss, const std::vector<double>& x,
                  double tol) {
  const auto f = SafetensorsFile::open(path);
  const double tau = 0.3;
  EXPECT_NEAR(f.read_as<double>("loss")[0], naive(loss, x, tau), tol);
  auto grad = [&](std::size_t k) {
    const double h = 1e-6;
    auto p = x, m = x;
    p[k] += h;
    m[k] -= h;
    return (naive(loss, p, tau) - naive(loss, m, tau)) / (2 * h);
  };
  const auto ga = f.read_as<double>("a.grad"), gb = f.read_as<double>("b.grad");
  ASSERT_EQ(ga.size(), static_cast<std::size_t>(kB * kD));
  for (std::size_t k = 0; k < ga.size(); ++k) {
    EXPECT_NEAR(ga[k], grad(k), tol) << "a.grad " << k;
    EXPECT_NEAR(gb[k], grad(kB * kD + k), tol) << "b.grad " << k;
  }
  EXPECT_EQ(f.contains("logit_scale.grad"), loss != "ntxent");
  EXPECT_EQ(f.contains("logit_bias.grad"), loss == "siglip");
  if (loss != "ntxent") {
    EXPECT_NEAR(f.read_as<double>("logit_scale.grad")[0], grad(2 * kB * kD), tol);
  }
  if (loss == "siglip") {
    EXPECT_NEAR(f.read_as<double>("logit_bias.grad")[0], grad(2 * kB * kD + 1), tol);
  }
}

TEST(ContrastiveLossProgram, MatchesTheDefinitionsAtOneToThreeRanks) {
  TempDir dir("contrastive_loss");
  const auto x = inputs();
  write_input<double>(dir.file("in.safetensors"), x);
  const std::vector<std::string> strategies = {"allgather-nograd", "gather", "allgather", "ring"};
  int k = 0;
  for (int ranks : {1, 2, 3})
    for (const std::string loss : {"ntxent", "clip", "siglip"}) {
      const std::string& st = strategies[k++ % strategies.size()];
      SCOPED_TRACE(loss + " " + st + " at " + std::to_string(ranks) + " ranks");
      const std::string out = dir.file(loss + st + std::to_string(ranks) + ".safetensors");
      const Outcome o = run(ranks, "--loss " + loss + " --strategy " + st + " --temperature 0.3 " +
                                       dir.file("in.safetensors") + " " + out);
      ASSERT_EQ(o.status, 0) << o.output;
      EXPECT_EQ(SafetensorsFile::open(out).dtype("a.grad"), "F64");
      check_output(out, loss, x, 1e-7);
    }
}

TEST(ContrastiveLossProgram, FloatInFloatOut) {
  TempDir dir("contrastive_loss");
  auto x = inputs();
  write_input<float>(dir.file("in.safetensors"), x);
  for (double& v : x) v = static_cast<float>(v);  // what the program reads
  const Outcome o = run(2, "--loss siglip --strategy ring " + dir.file("in.safetensors") + " " +
                               dir.file("out.safetensors"));
  ASSERT_EQ(o.status, 0) << o.output;
  const auto f = SafetensorsFile::open(dir.file("out.safetensors"));
  for (const char* n : {"loss", "a.grad", "b.grad", "logit_scale.grad", "logit_bias.grad"})
    EXPECT_EQ(f.dtype(n), "F32") << n;
  check_output(dir.file("out.safetensors"), "siglip", x, 2e-4);
}

TEST(ContrastiveLossProgram, BadFilesAndOptionsAreClearErrors) {
  TempDir dir("contrastive_loss");
  const auto x = inputs();
  const std::string in = dir.file("in.safetensors"), out = dir.file("out.safetensors");
  write_input<double>(in, x);
  write_input<double>(dir.file("no_scale.safetensors"), x, false, false);
  write_input<double>(dir.file("bad_shape.safetensors"), x, true, true, Shape{kB - 1, kD});
  {
    std::vector<std::int32_t> v(kB * kD, 1);
    distop::io::write_safetensors(dir.file("ints.safetensors"),
                                  {{"a", Shape{kB, kD}, v.data()}, {"b", Shape{kB, kD}, v.data()}});
  }
  struct Case {
    std::string args, needle;
  };
  const std::vector<Case> cases = {
      {"--loss cosine --strategy ring " + in + " " + out, "unknown loss 'cosine'"},
      {"--loss clip --strategy tree " + in + " " + out,
       "expected one of allgather-nograd, gather, allgather, ring"},
      {"--loss clip " + in + " " + out, "--strategy is required"},
      {"--loss clip --strategy ring " + in, "expected IN.safetensors and OUT.safetensors"},
      {"--loss clip --strategy ring " + dir.file("missing.safetensors") + " " + out,
       "missing.safetensors"},
      {"--loss clip --strategy gather " + dir.file("no_scale.safetensors") + " " + out,
       "has no tensor 'logit_scale'"},
      {"--loss ntxent --strategy ring " + dir.file("bad_shape.safetensors") + " " + out,
       "differ in shape"},
      {"--loss ntxent --strategy ring " + dir.file("ints.safetensors") + " " + out,
       "expected F32 or F64"},
      {"--loss ntxent --strategy ring --temperature -1 " + in + " " + out,
       "--temperature must be a positive number"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    expect_clean_failure(run(2, c.args), c.needle);
  }
}

}  // namespace

// Every rank must be given the same flags (as the training programs: train::run_main): ranks
// started with a different --temperature or --strategy (mpiexec's ':' gives each its own) stop
// with an error naming the flag, exit status 2 on every rank, before any loss is computed.
TEST(ContrastiveLossProgram, FlagsThatDifferBetweenTheRanksAreAnError) {
  TempDir dir("contrastive_loss_flags");
  const std::string in = dir.file("in.safetensors"), out = dir.file("out.safetensors");
  write_input<double>(in, inputs());
  struct Case {
    std::string rank0, rank1, flag;
  };
  const std::vector<Case> cases = {
      {"--loss ntxent --strategy ring --temperature 0.5",
       "--loss ntxent --strategy ring --temperature 0.1", "--temperature"},
      {"--loss clip --strategy ring", "--loss clip --strategy gather", "--strategy"},
      {"--loss ntxent --strategy ring", "--loss ntxent --strategy ring --temperature 0.5",
       "--temperature"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.rank0 + " : " + c.rank1);
    const auto o = run(1, c.rank0 + " " + in + " " + out + " : -n 1 " + DISTOP_CONTRASTIVE_LOSS +
                              " " + c.rank1 + " " + in + " " + out);
    EXPECT_EQ(o.status, 2) << o.output;
    expect_clean_failure(o, "contrastive_loss: error: " + c.flag + " differs between the ranks");
    EXPECT_EQ(o.output.find(" loss = "), std::string::npos) << o.output;
  }
}
