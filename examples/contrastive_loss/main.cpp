// contrastive_loss: a contrastive loss and its gradients, for comparison with your own code.
//
//   mpiexec -n N contrastive_loss --loss ntxent|clip|siglip
//       --strategy allgather-nograd|gather|allgather|ring [--temperature T] IN.safetensors
//       OUT.safetensors
//
// IN holds `a` and `b` ([B, D], F32 or F64, the same dtype: two views, or image and text
// embeddings); for clip `logit_scale` (one element: the log of the scale, as open_clip's
// parameter), for siglip `logit_scale` and `logit_bias`. The losses L2-normalise a and b first;
// ntxent divides the similarities by --temperature (default 0.5). The B rows are split over the N
// ranks in balanced blocks (the first B mod N ranks hold one more), the loss is computed with the
// chosen strategy, and rank 0 writes OUT in IN's precision: `loss` (one element) and the gradient
// of the loss with respect to each input, `a.grad`, `b.grad`, `logit_scale.grad` and
// `logit_bias.grad` (those the loss has), assembled from every rank. Errors are printed by rank 0,
// with exit status 2 on every rank for a flag that does not parse or that differs between the
// ranks (every rank must be given the same flags, as the training programs, train/cli.hpp), and 1
// for bad settings and files.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <distop/distop.hpp>
#include <distop/loss/total.hpp>
#include <distop/train/cli.hpp>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace distop;

const char* kProgram = "contrastive_loss";

struct Options {
  std::string loss;
  loss::ContrastiveStrategy strategy = loss::ContrastiveStrategy::allgather;
  double temperature = 0.5;
  std::string in, out;
};

[[noreturn]] void usage_error(const std::string& what) {
  throw Error(kProgram, what +
                            "\nusage: contrastive_loss --loss ntxent|clip|siglip --strategy "
                            "allgather-nograd|gather|allgather|ring [--temperature T] "
                            "IN.safetensors OUT.safetensors");
}

// The flags as parsed (the same on every rank: run_main agrees them), checked.
Options checked(std::string loss_name, const std::string& strategy, double temperature,
                const std::vector<std::string>& files) {
  Options o;
  o.loss = std::move(loss_name);
  if (o.loss != "ntxent" && o.loss != "clip" && o.loss != "siglip")
    usage_error("unknown loss '" + o.loss + "'; expected one of ntxent, clip, siglip");
  o.strategy = loss::parse_strategy(strategy);
  if (!(temperature > 0) || !std::isfinite(temperature))
    usage_error("--temperature must be a positive number, found " + std::to_string(temperature));
  o.temperature = temperature;
  if (files.size() != 2)
    usage_error("expected IN.safetensors and OUT.safetensors, found " +
                std::to_string(files.size()) + " file arguments");
  o.in = files[0];
  o.out = files[1];
  return o;
}

// What IN holds, checked: the embeddings' shape and dtype, and the scalars the loss needs.
struct Input {
  std::string dtype;
  std::int64_t batch = 0, dim = 0;
  Shape scale_shape, bias_shape;
};

Input inspect(const io::SafetensorsFile& f, const Options& o) {
  Input in;
  for (const char* name : {"a", "b"}) {
    if (!f.contains(name)) throw Error(kProgram, "file " + o.in + " has no tensor '" + name + "'");
    const std::string& dt = f.dtype(name);
    if (dt != "F32" && dt != "F64")
      throw Error(kProgram, std::string("tensor '") + name + "' in file " + o.in + " is " + dt +
                                "; expected F32 or F64");
    if (f.shape(name).rank() != 2)
      throw Error(kProgram, std::string("tensor '") + name + "' in file " + o.in + " has shape " +
                                f.shape(name).str() + "; expected [B, D]");
  }
  in.dtype = f.dtype("a");
  if (f.dtype("b") != in.dtype)
    throw Error(kProgram, "tensors 'a' (" + in.dtype + ") and 'b' (" + f.dtype("b") + ") in file " +
                              o.in + " have different dtypes");
  if (f.shape("a") != f.shape("b"))
    throw Error(kProgram, "tensors 'a' " + f.shape("a").str() + " and 'b' " + f.shape("b").str() +
                              " in file " + o.in + " differ in shape");
  in.batch = f.shape("a")[0];
  in.dim = f.shape("a")[1];
  if (in.batch < 1 || in.dim < 1)
    throw Error(kProgram, "tensors 'a' and 'b' in file " + o.in + " are empty (shape " +
                              f.shape("a").str() + ")");
  std::vector<std::string> scalars;
  if (o.loss != "ntxent") scalars.push_back("logit_scale");
  if (o.loss == "siglip") scalars.push_back("logit_bias");
  for (const std::string& name : scalars) {
    if (!f.contains(name))
      throw Error(kProgram, "file " + o.in + " has no tensor '" + name + "' (the " + o.loss +
                                " loss needs it)");
    if (f.dtype(name) != in.dtype)
      throw Error(kProgram, "tensor '" + name + "' in file " + o.in + " is " + f.dtype(name) +
                                "; expected " + in.dtype + " as 'a'");
    if (f.shape(name).numel() != 1)
      throw Error(kProgram, "tensor '" + name + "' in file " + o.in + " has shape " +
                                f.shape(name).str() + "; expected one element");
    (name == "logit_scale" ? in.scale_shape : in.bias_shape) = f.shape(name);
  }
  return in;
}

template <class T>
Var<T> local_var(const std::vector<T>& values, std::int64_t rows, std::int64_t cols) {
  Partition self = Partition::self();
  TensorSpace space(self, Decomposition::balanced(Shape{rows, cols}, self.shape(), {0, -1}));
  DistTensor<T> x(space);
  if (rows * cols > 0) x.local().copy_from(Tensor<T>::from_vector(Shape{rows, cols}, values));
  return Var<T>(x, true);
}

template <class T>
void run(const Options& o, const Input& in) {
  int size = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::int64_t B = in.batch, D = in.dim;
  std::vector<int> rows(size), counts(size), displs(size);
  for (int r = 0, at = 0; r < size; ++r) {
    rows[r] = static_cast<int>(B / size + (r < B % size ? 1 : 0));
    counts[r] = static_cast<int>(rows[r] * D);
    displs[r] = at;
    at += counts[r];
  }
  // Every rank reads its rows (and the scalars); a failure anywhere fails everywhere.
  std::vector<T> a_rows, b_rows, scale(1), bias(1);
  comm::agree(MPI_COMM_WORLD, kProgram, [&] {
    const auto f = io::SafetensorsFile::open(o.in);
    const auto a_all = f.read<T>("a"), b_all = f.read<T>("b");
    a_rows.assign(a_all.begin() + displs[rank], a_all.begin() + displs[rank] + counts[rank]);
    b_rows.assign(b_all.begin() + displs[rank], b_all.begin() + displs[rank] + counts[rank]);
    if (o.loss != "ntxent") scale = f.read<T>("logit_scale");
    if (o.loss == "siglip") bias = f.read<T>("logit_bias");
  });
  Var<T> a = local_var(a_rows, rows[rank], D), b = local_var(b_rows, rows[rank], D);
  Var<T> t = local_var(scale, 1, 1), z = local_var(bias, 1, 1);
  loss::ContrastiveOptions opt;
  opt.strategy = o.strategy;
  Tape tape;
  Var<T> l = o.loss == "ntxent"
                 ? loss::ntxent(tape, a, b, static_cast<T>(o.temperature), MPI_COMM_WORLD, opt)
             : o.loss == "clip" ? loss::clip_loss(tape, a, b, t, MPI_COMM_WORLD, opt)
                                : loss::siglip_loss(tape, a, b, t, z, MPI_COMM_WORLD, opt);
  // Each rank holds its component of the loss; the loss is their sum (docs/losses.md).
  const T loss_value = static_cast<T>(loss::total(l));
  backward(tape, l);

  // Assemble on rank 0: the rows' gradients gathered, the scalars' 1/P shares summed.
  std::vector<T> ga(rank == 0 ? B * D : 0), gb(rank == 0 ? B * D : 0);
  const auto my_ga = a.grad().local().to_vector(), my_gb = b.grad().local().to_vector();
  const MPI_Datatype type = comm::mpi_type<T>();
  MPI_Gatherv(my_ga.data(), counts[rank], type, ga.data(), counts.data(), displs.data(), type, 0,
              MPI_COMM_WORLD);
  MPI_Gatherv(my_gb.data(), counts[rank], type, gb.data(), counts.data(), displs.data(), type, 0,
              MPI_COMM_WORLD);
  double shares[2] = {o.loss != "ntxent" ? double(t.grad().local().to_vector()[0]) : 0.0,
                      o.loss == "siglip" ? double(z.grad().local().to_vector()[0]) : 0.0};
  double sums[2] = {0, 0};
  MPI_Reduce(shares, sums, 2, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  const T gt = static_cast<T>(sums[0]), gz = static_cast<T>(sums[1]);

  comm::agree(MPI_COMM_WORLD, kProgram, [&] {
    if (rank != 0) return;
    std::vector<io::TensorEntry> out = {{"loss", Shape{1}, &loss_value},
                                        {"a.grad", Shape{B, D}, ga.data()},
                                        {"b.grad", Shape{B, D}, gb.data()}};
    if (o.loss != "ntxent") out.emplace_back("logit_scale.grad", in.scale_shape, &gt);
    if (o.loss == "siglip") out.emplace_back("logit_bias.grad", in.bias_shape, &gz);
    io::write_safetensors(o.out, out);
  });
  if (rank == 0)
    std::printf("%s %s on %d ranks: B = %lld, D = %lld, loss = %.17g\n", o.loss.c_str(),
                std::string(loss::strategy_name(o.strategy)).c_str(), size,
                static_cast<long long>(B), static_cast<long long>(D), double(loss_value));
}

}  // namespace

int main(int argc, char** argv) {
  std::string loss_name, strategy;
  double temperature = 0.5;
  std::vector<std::string> files;
  CLI::App app{
      "A contrastive loss and its gradients over the ranks (distop example): reads a and b (and "
      "logit_scale, logit_bias) from IN, writes the loss and the gradients to OUT."};
  app.add_option("--loss", loss_name, "ntxent, clip or siglip")->required();
  app.add_option("--strategy", strategy, "allgather-nograd, gather, allgather or ring")->required();
  app.add_option("--temperature", temperature, "NT-Xent's temperature")->capture_default_str();
  app.add_option("files", files, "IN.safetensors OUT.safetensors");
  return train::run_main(argc, argv, app, kProgram, [&] {
    const Options o = checked(loss_name, strategy, temperature, files);
    Input in;
    comm::agree(MPI_COMM_WORLD, kProgram,
                [&] { in = inspect(io::SafetensorsFile::open(o.in), o); });
    if (in.dtype == "F32")
      run<float>(o, in);
    else
      run<double>(o, in);
    return 0;
  });
}
