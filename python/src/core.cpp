// distop._core: the Python bindings of distop (nanobind). Tensors cross by DLPack without a copy:
// an input array (a torch CPU tensor, a numpy array) becomes a distop Tensor over the same memory,
// kept alive while distop uses it, and results come back as arrays over distop's memory, owned
// by a capsule that holds the distop Tensor.

#include <mpi.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"
#include "distop/autodiff/apply.hpp"
#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/comm/collectives.hpp"
#include "distop/core/environment.hpp"
#include "distop/core/error.hpp"
#include "distop/core/mpi_check.hpp"
#include "distop/core/tensor.hpp"
#include "distop/dist/assemble.hpp"
#include "distop/dist/decomposition.hpp"
#include "distop/dist/dist_tensor.hpp"
#include "distop/dist/partition.hpp"
#include "distop/dist/tensor_space.hpp"
#include "distop/loss/contrastive.hpp"
#include "distop/nn/all_max.hpp"
#include "distop/nn/all_min.hpp"
#include "distop/ops/all_gather.hpp"
#include "distop/ops/all_sum_reduce.hpp"
#include "distop/ops/broadcast.hpp"
#include "distop/ops/gather.hpp"
#include "distop/ops/halo.hpp"
#include "distop/ops/halo_exchange.hpp"
#include "distop/ops/linear_operator.hpp"
#include "distop/ops/reduce_scatter.hpp"
#include "distop/ops/repartition.hpp"
#include "distop/ops/scatter.hpp"
#include "distop/ops/send_recv.hpp"
#include "distop/ops/sum_reduce.hpp"
#include "distop/testing/adjoint_test.hpp"
#include "layers.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace distop::python {
namespace {

std::unique_ptr<Environment> environment;

void initialize() {
  if (environment) return;
  static char name[] = "python";
  static char* args[] = {name, nullptr};
  int argc = 1;
  char** argv = args;
  EnvironmentOptions options;
#if DISTOP_DEVICE_MEMORY_SPACE
  // torch's autograd runs the backward pass of GPU tensors on its device thread, not the main one.
  options.mpi_thread_level = MPI_THREAD_SERIALIZED;
#endif
  environment = std::make_unique<Environment>(argc, argv, options);
}

void finalize() { environment.reset(); }

// ---- Operators

// One distop operator for one scalar type, with what the nonblocking forms need.
struct Operator {
  DType dtype = DType::f64;
  std::shared_ptr<const LinearOperator<float>> f;
  std::shared_ptr<const LinearOperator<double>> d;
  std::shared_ptr<const SendRecv<float>> send_recv_f;
  std::shared_ptr<const SendRecv<double>> send_recv_d;
  std::shared_ptr<const AllSumReduce<float>> all_sum_f;
  std::shared_ptr<const AllSumReduce<double>> all_sum_d;

  const TensorSpace& domain() const { return dtype == DType::f32 ? f->domain() : d->domain(); }
  const TensorSpace& range() const { return dtype == DType::f32 ? f->range() : d->range(); }
  std::string name() const { return dtype == DType::f32 ? f->name() : d->name(); }
  std::string dtype_name() const { return dtype == DType::f32 ? "float32" : "float64"; }

  template <class T>
  const LinearOperator<T>& get() const {
    if constexpr (std::is_same_v<T, float>)
      return *f;
    else
      return *d;
  }
};

template <template <class> class Op, class... Args>
std::shared_ptr<Operator> make_operator(const std::string& dtype, Args&&... args) {
  auto op = std::make_shared<Operator>();
  op->dtype = dtype_from_name(dtype);
  if (op->dtype == DType::f32)
    op->f = std::make_shared<Op<float>>(std::forward<Args>(args)...);
  else
    op->d = std::make_shared<Op<double>>(std::forward<Args>(args)...);
  return op;
}

void check_dtype(const Operator& op, const Array& a, const char* what) {
  const auto name = op.name();
  DISTOP_CHECK(dtype_of(a, name) == op.dtype, name, what,
               " has another dtype than the operator's (", op.dtype_name(), ")");
}

nb::object apply(const Operator& op, const Array& a, bool adjoint, bool agreed, bool numpy) {
  check_dtype(op, a, adjoint ? "the adjoint's input" : "the input");
  auto run = [&]<class T>() -> nb::object {
    const auto& f = op.get<T>();
    const auto& in_space = adjoint ? f.range() : f.domain();
    const auto& out_space = adjoint ? f.domain() : f.range();
    auto x = dist<T>(in_space, a, agreed);
    auto y = DistTensor<T>::uninitialized(out_space);
    if (adjoint)
      f.adjoint(x, y);
    else
      f.forward(x, y);
    return to_array(y.local(), numpy);
  };
  return op.dtype == DType::f32 ? run.operator()<float>() : run.operator()<double>();
}

// ---- Nonblocking transfers: a request and the buffers it uses until it completes.

struct Transfer {
  comm::Request request;
  nb::object result;  // the output array, filled when the request completes
  void wait() { request.wait(); }
};

std::shared_ptr<Transfer> start(const Operator& op, const Array& a, bool adjoint, bool numpy) {
  check_dtype(op, a, "the input");
  auto run = [&]<class T>() {
    const auto& f = op.get<T>();
    const auto& in_space = adjoint ? f.range() : f.domain();
    const auto& out_space = adjoint ? f.domain() : f.range();
    auto x = dist<T>(in_space, a, true);
    auto y = DistTensor<T>::uninitialized(out_space);
    auto t = std::make_shared<Transfer>();
    std::shared_ptr<const SendRecv<T>> sr;
    std::shared_ptr<const AllSumReduce<T>> asr;
    if constexpr (std::is_same_v<T, float>) {
      sr = op.send_recv_f;
      asr = op.all_sum_f;
    } else {
      sr = op.send_recv_d;
      asr = op.all_sum_d;
    }
    if (sr) {
      t->request = adjoint ? sr->start_adjoint(x, y) : sr->start_forward(x, y);
    } else {
      DISTOP_CHECK(asr != nullptr, op.name(),
                   "has no nonblocking form (SendRecv and AllSumReduce do)");
      check_space(x, asr->domain(), op.name() + ".start", "the input");
      if (asr->comm() != MPI_COMM_NULL)
        t->request = comm::iallreduce_sum(x.data(), y.data(), y.local_numel(), asr->comm());
    }
    t->request.keep_alive(std::make_shared<DistTensor<T>>(x));
    t->request.keep_alive(std::make_shared<DistTensor<T>>(y));
    t->result = to_array(y.local(), numpy);
    return t;
  };
  return op.dtype == DType::f32 ? run.operator()<float>() : run.operator()<double>();
}

// ---- Max and min all-reduce: on a tape of their own, kept from forward to backward.

struct Extremum {
  DType dtype = DType::f64;
  Tape tape;
  Var<float> xf, yf;
  Var<double> xd, yd;
  TensorSpace space;
  std::vector<int> axes;
  bool max = true;
  bool replayed = false;  // a tape replays once; a second backward records the operation again
};

std::pair<std::shared_ptr<Extremum>, nb::object> extremum_forward(const TensorSpace& space,
                                                                  const std::vector<int>& axes,
                                                                  const Array& a, bool max,
                                                                  bool numpy) {
  auto e = std::make_shared<Extremum>();
  e->dtype = dtype_of(a, max ? "AllMax" : "AllMin");
  e->space = space;
  e->axes = axes;
  e->max = max;
  auto run = [&]<class T>(Var<T>& x, Var<T>& y) {
    x = Var<T>(dist<T>(space, a, true).clone(), true);  // the forward keeps x for backward
    y = max ? nn::all_max(e->tape, x, axes) : nn::all_min(e->tape, x, axes);
    return to_array(y.value().local(), numpy);
  };
  nb::object out = e->dtype == DType::f32 ? run.operator()<float>(e->xf, e->yf)
                                          : run.operator()<double>(e->xd, e->yd);
  return {e, out};
}

nb::object extremum_backward(Extremum& e, const Array& dy, bool numpy) {
  auto run = [&]<class T>(Var<T>& x, Var<T>& y) {
    DISTOP_CHECK(dtype_of(dy, "AllMax.backward") == e.dtype, "AllMax.backward",
                 "the gradient has another dtype than the input");
    auto g = dist<T>(e.space, dy, true);
    if (e.replayed) {
      // Again (torch's retain_graph, gradcheck's second pass): the same forward on a new tape,
      // collective as the first, on every rank alike.
      e.tape.clear();
      x = Var<T>(DistTensor<T>::from_local(e.space, x.value().local()), true);
      y = e.max ? nn::all_max(e.tape, x, e.axes) : nn::all_min(e.tape, x, e.axes);
    }
    e.replayed = true;
    y.new_grad_for_overwrite().local().copy_from(g.local());
    e.tape.backward();
    return to_array(x.grad().local(), numpy);
  };
  return e.dtype == DType::f32 ? run.operator()<float>(e.xf, e.yf)
                               : run.operator()<double>(e.xd, e.yd);
}

// ---- The sharded contrastive losses: on a tape of their own, kept from forward to backward.

enum class Contrastive { ntxent = 0, clip = 1, siglip = 2 };

struct ContrastiveState {
  Contrastive kind = Contrastive::ntxent;
  DType dtype = DType::f64;
  double temperature = 1;
  MPI_Comm comm = MPI_COMM_NULL;
  loss::ContrastiveOptions options;
  Tape tape;
  Var<float> af, bf, tf, cf, lf;
  Var<double> ad, bd, td, cd, ld;
  bool replayed = false;
};

// [rows, features] on this process alone, the feature axis whole: the losses' row blocks.
TensorSpace batch_space(const Shape& s) {
  Partition p = Partition::self();
  return TensorSpace(p, Decomposition::balanced(s, p.shape(), {0, -1}));
}

TensorSpace scalar_space() {
  Partition p = Partition::self();
  return TensorSpace(p, Decomposition::balanced(Shape{1}, p.shape(), {-1}));
}

template <class T>
Var<T> contrastive_record(ContrastiveState& st, Var<T>& a, Var<T>& b, Var<T>& t, Var<T>& c) {
  if (st.kind == Contrastive::ntxent)
    return loss::ntxent(st.tape, a, b, static_cast<T>(st.temperature), st.comm, st.options);
  if (st.kind == Contrastive::clip) return loss::clip_loss(st.tape, a, b, t, st.comm, st.options);
  return loss::siglip_loss(st.tape, a, b, t, c, st.comm, st.options);
}

template <class T>
Var<T> leaf(const TensorSpace& space, const Array& x) {
  return Var<T>(DistTensor<T>::from_local(space, wrap<T>(x).clone()), true);
}

std::pair<std::shared_ptr<ContrastiveState>, nb::object> contrastive_forward(
    int kind, const Array& a, const Array& b, const Array& t, const Array& c, double temperature,
    std::int64_t comm, const std::string& strategy, int root, bool normalize) {
  auto st = std::make_shared<ContrastiveState>();
  st->kind = static_cast<Contrastive>(kind);
  st->dtype = dtype_of(a, "contrastive loss");
  st->temperature = temperature;
  st->comm = comm_from_handle(comm);
  st->options.strategy = loss::parse_strategy(strategy);
  st->options.root = root;
  st->options.normalize = normalize;
  auto run = [&]<class T>(Var<T>& va, Var<T>& vb, Var<T>& vt, Var<T>& vc, Var<T>& vl) {
    // Not the dtype or dimensions of a: those the loss agrees on over the ranks itself.
    const auto shape_of_array = [](const Array& x) {
      std::vector<std::int64_t> e(x.ndim());
      for (std::size_t i = 0; i < x.ndim(); ++i) e[i] = static_cast<std::int64_t>(x.shape(i));
      return Shape(e);
    };
    DISTOP_CHECK(a.ndim() == 2 && b.ndim() == 2, "contrastive loss",
                 "the embeddings must be [rows, features] tensors");
    va = leaf<T>(batch_space(shape_of_array(a)), a);
    vb = leaf<T>(batch_space(shape_of_array(b)), b);
    vt = leaf<T>(scalar_space(), t);
    vc = leaf<T>(scalar_space(), c);
    vl = contrastive_record(*st, va, vb, vt, vc);
    return to_array(vl.value().local(), false);
  };
  nb::object out = st->dtype == DType::f32
                       ? run.operator()<float>(st->af, st->bf, st->tf, st->cf, st->lf)
                       : run.operator()<double>(st->ad, st->bd, st->td, st->cd, st->ld);
  return {st, out};
}

nb::tuple contrastive_backward(ContrastiveState& st, const Array& seed) {
  auto run = [&]<class T>(Var<T>& a, Var<T>& b, Var<T>& t, Var<T>& c, Var<T>& l) {
    if (st.replayed) {
      // Again (retain_graph, gradcheck's second pass): the same forward on a new tape, collective
      // as the first, on every rank alike.
      st.tape.clear();
      a = Var<T>(a.value(), true);
      b = Var<T>(b.value(), true);
      t = Var<T>(t.value(), true);
      c = Var<T>(c.value(), true);
      l = contrastive_record(st, a, b, t, c);
    }
    st.replayed = true;
    DistTensor<T> s(l.space());
    s.local().copy_from(wrap<T>(seed));
    distop::backward(st.tape, l, s);
    const auto grad = [](Var<T>& v) -> nb::object {
      return to_array(v.has_grad() ? v.grad().local() : Tensor<T>(v.value().local().shape()),
                      false);
    };
    return nb::make_tuple(grad(a), grad(b), grad(t), grad(c));
  };
  DISTOP_CHECK(dtype_of(seed, "contrastive loss") == st.dtype, "contrastive loss",
               "the loss's gradient has another dtype than the loss");
  return st.dtype == DType::f32 ? run.operator()<float>(st.af, st.bf, st.tf, st.cf, st.lf)
                                : run.operator()<double>(st.ad, st.bd, st.td, st.cd, st.ld);
}

// The shape of the tensor that rank `root` of the communicator alone holds, the agreed dtype and
// whether any rank's input requires a gradient.
std::tuple<std::vector<std::int64_t>, std::string, bool> shape_on_rank(
    std::int64_t comm_handle, int root, const std::vector<std::int64_t>& local,
    const std::string& dtype, bool requires_grad, const std::string& op) {
  MPI_Comm comm = comm_from_handle(comm_handle);
  int size = 0, rank = 0;
  DISTOP_MPI_CHECK(MPI_Comm_size(comm, &size), op);
  DISTOP_MPI_CHECK(MPI_Comm_rank(comm, &rank), op);
  // Every rank checks root the same way before anything is exchanged.
  DISTOP_CHECK(root >= 0 && root < size, op, "rank ", root, " is not a rank of a communicator of ",
               size);
  const auto a = agree(comm, local, dtype, requires_grad, rank == root, op);
  return {a.shapes[static_cast<std::size_t>(root)], a.dtype == DType::f32 ? "float32" : "float64",
          a.requires_grad};
}

double allreduce_sum(std::int64_t comm_handle, double value) {
  double out = 0;
  allreduce(&value, &out, 1, MPI_SUM, comm_from_handle(comm_handle), "allreduce_sum");
  return out;
}

// ---- Assembling and distributing global tensors

template <class T>
nb::object assemble_impl(const TensorSpace& space, const Array& a, int root, bool numpy) {
  auto x = dist<T>(space, a, false);
  auto values = assemble(x, root);
  Tensor<T> t;
  if (space.partition().parent_rank() == root)
    t = Tensor<T>::from_vector(space.global_shape(), values);
  else
    t = Tensor<T>(Shape(std::vector<std::int64_t>(static_cast<std::size_t>(space.rank()), 0)));
  return to_array(t, numpy);
}

template <class T>
nb::object distribute_impl(const TensorSpace& space, const Array& global, bool numpy) {
  auto g = wrap<T>(global, "distribute");
  DISTOP_CHECK(g.shape() == space.global_shape(), "distribute", "the global tensor has shape ",
               g.shape().str(), ", the space ", space.global_shape().str());
  const std::vector<T> values = g.to_vector();
  DistTensor<T> x = DistTensor<T>::uninitialized(space);
  distribute(values, x);
  return to_array(x.local(), numpy);
}

HaloSpec spec_from(const std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>>& widths) {
  HaloSpec spec;
  for (const auto& axis : widths) {
    std::vector<GhostWidths> parts;
    for (const auto& [l, r] : axis) parts.push_back(GhostWidths{l, r});
    spec.push_back(std::move(parts));
  }
  return spec;
}

}  // namespace
}  // namespace distop::python

NB_MODULE(_core, m) {
  using namespace distop;
  using namespace distop::python;
  m.doc() = "distop's C++ core: partitions, spaces, the data-movement operators and the layers";

  nb::exception<Error>(m, "Error", PyExc_RuntimeError);
  // Autograd contexts and operator caches may outlive the interpreter's last collection; they
  // are released with it, which nanobind would otherwise report as leaks.
  nb::set_leak_warnings(false);

  m.def("initialize", &initialize,
        "Initialises MPI (unless already initialised, e.g. by mpi4py) and Kokkos; idempotent.");
  m.def(
      "tensor_device",
      []() {
        initialize();
        const auto d = tensor_device();
        return std::make_pair(std::string(d.type == nb::device::cpu::value ? "cpu" : "cuda"), d.id);
      },
      "Where this build's tensors live: ('cpu', 0), or ('cuda', k) with k this rank's GPU.");
  m.def("finalize", &finalize, "Finalises Kokkos, then MPI where distop initialised it.");
  m.def("world_rank", &world_rank);
  m.def("world_handle", []() { return static_cast<std::int64_t>(MPI_Comm_c2f(MPI_COMM_WORLD)); });
  m.def("world_size", []() {
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    return size;
  });
  m.def("comm_rank", [](std::int64_t h) {
    int rank = 0;
    DISTOP_MPI_CHECK(MPI_Comm_rank(comm_from_handle(h), &rank), "comm_rank");
    return rank;
  });
  m.def("comm_size", [](std::int64_t h) {
    int size = 0;
    DISTOP_MPI_CHECK(MPI_Comm_size(comm_from_handle(h), &size), "comm_size");
    return size;
  });
  m.def("barrier", [](std::int64_t h) {
    MPI_Request r = MPI_REQUEST_NULL;
    DISTOP_MPI_CHECK(MPI_Ibarrier(comm_from_handle(h), &r), "barrier");
    complete(r);
  });
  m.def("allreduce_sum", &allreduce_sum, "comm"_a, "value"_a);
  m.def("allgather_int", [](std::int64_t h, std::int64_t v) {
    int size = 0;
    DISTOP_MPI_CHECK(MPI_Comm_size(comm_from_handle(h), &size), "allgather");
    std::vector<std::int64_t> all(static_cast<std::size_t>(size));
    allgather(&v, 1, all.data(), comm_from_handle(h), "allgather");
    return all;
  });
  // Sums a float64 array over every rank of the communicator, in place.
  m.def("allreduce_sum_array",
        [](std::int64_t h, nb::ndarray<double, nb::c_contig, nb::device::cpu> a) {
          allreduce(MPI_IN_PLACE, a.data(), static_cast<int>(a.size()), MPI_SUM,
                    comm_from_handle(h), "allreduce_sum");
        });
  // An array viewed through a distop Tensor and handed back: the same memory both ways (the
  // zero-copy check of the tests).
  m.def(
      "roundtrip",
      [](const Array& a, bool numpy) {
        return dtype_of(a, "roundtrip") == DType::f32 ? to_array(wrap<float>(a), numpy)
                                                      : to_array(wrap<double>(a), numpy);
      },
      "x"_a, "numpy"_a = false);
  m.def("allreduce_max_int", [](std::int64_t h, std::int64_t v) {
    std::int64_t out = 0;
    allreduce(&v, &out, 1, MPI_MAX, comm_from_handle(h), "allreduce_max");
    return out;
  });

  nb::class_<Partition>(m, "Partition")
      .def(
          "__init__",
          [](Partition* p, std::int64_t comm, const std::vector<std::int64_t>& grid,
             const std::vector<int>& ranks) {
            new (p) Partition(comm_from_handle(comm), shape_of(grid), ranks);
          },
          "comm"_a, "grid"_a, "ranks"_a = std::vector<int>{})
      .def_prop_ro("shape", [](const Partition& p) { return extents_of(p.shape()); })
      .def_prop_ro("dim", &Partition::dim)
      .def_prop_ro("size", &Partition::size)
      .def_prop_ro("active", &Partition::active)
      .def_prop_ro("coords", &Partition::coords)
      .def_prop_ro("index", &Partition::index)
      .def_prop_ro("parent_rank", &Partition::parent_rank)
      .def_prop_ro("parent_size", &Partition::parent_size)
      .def_prop_ro("ranks", &Partition::ranks)
      .def_prop_ro(
          "parent_handle",
          [](const Partition& p) { return static_cast<std::int64_t>(MPI_Comm_c2f(p.parent())); })
      .def("rank_at", &Partition::rank_at)
      .def("coords_of_rank", &Partition::coords_of_rank)
      .def("slice", &Partition::slice, "axis"_a, "index"_a)
      .def("reshape", [](const Partition& p,
                         const std::vector<std::int64_t>& g) { return p.reshape(shape_of(g)); })
      .def("unite", &Partition::unite)
      .def("same_as", &Partition::same_as)
      .def("__str__", &Partition::str)
      .def("__repr__", &Partition::str);

  nb::class_<Decomposition>(m, "Decomposition")
      .def_static(
          "balanced",
          [](const std::vector<std::int64_t>& global, const std::vector<std::int64_t>& grid,
             const std::vector<int>& axis_map) {
            return Decomposition::balanced(shape_of(global), shape_of(grid), axis_map);
          },
          "global_shape"_a, "grid"_a, "axis_map"_a = std::vector<int>{})
      .def_static(
          "blocks",
          [](const std::vector<std::int64_t>& global, const std::vector<std::int64_t>& grid,
             const std::vector<std::vector<std::int64_t>>& extents,
             const std::vector<int>& axis_map) {
            return Decomposition::blocks(shape_of(global), shape_of(grid), extents, axis_map);
          },
          "global_shape"_a, "grid"_a, "extents"_a, "axis_map"_a = std::vector<int>{})
      .def_prop_ro("global_shape",
                   [](const Decomposition& d) { return extents_of(d.global_shape()); })
      .def_prop_ro("grid", [](const Decomposition& d) { return extents_of(d.grid()); })
      .def_prop_ro("axis_map", &Decomposition::axis_map)
      .def("bounds", &Decomposition::bounds)
      .def("is_balanced", [](const Decomposition& d) { return d.balanced(); })
      .def("__str__", &Decomposition::str)
      .def("__eq__", [](const Decomposition& a, const Decomposition& b) { return a == b; });

  nb::class_<TensorSpace>(m, "TensorSpace")
      .def(
          "__init__",
          [](TensorSpace* s, const std::vector<std::int64_t>& global, const Partition& p) {
            new (s) TensorSpace(shape_of(global), p);
          },
          "global_shape"_a, "partition"_a)
      .def(
          "__init__",
          [](TensorSpace* s, const Partition& p, const Decomposition& d) {
            new (s) TensorSpace(p, d);
          },
          "partition"_a, "decomposition"_a)
      .def_prop_ro("global_shape",
                   [](const TensorSpace& s) { return extents_of(s.global_shape()); })
      .def_prop_ro("partition", &TensorSpace::partition)
      .def_prop_ro("decomposition", &TensorSpace::decomposition)
      .def_prop_ro("local_shape", [](const TensorSpace& s) { return extents_of(s.local_shape()); })
      .def_prop_ro("local_offset", &TensorSpace::local_offset)
      .def("local_shape_of_rank",
           [](const TensorSpace& s, int r) { return extents_of(s.local_shape_of_rank(r)); })
      .def("fingerprint", &TensorSpace::fingerprint)
      .def("__eq__", [](const TensorSpace& a, const TensorSpace& b) { return a == b; })
      .def("__str__", &TensorSpace::str)
      .def("__repr__", &TensorSpace::str);

  m.def("halo_space",
        [](const TensorSpace& interior,
           const std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>>& widths) {
          return halo_space(interior, spec_from(widths));
        });
  m.def("gathered_space", &gathered_space);
  // DistDL's halo rule along one axis (ops/halo.hpp): per part, (own_begin, own_end, out_begin,
  // out_end, need_begin, need_end, left, right).
  m.def(
      "halo_widths",
      [](std::int64_t n, std::int64_t parts, std::int64_t kernel, std::int64_t stride,
         std::int64_t padding, std::int64_t dilation) {
        std::vector<std::vector<std::int64_t>> out;
        for (const auto& h : halo_widths(n, parts, ConvWindow{kernel, stride, padding, dilation}))
          out.push_back({h.own_begin, h.own_end, h.out_begin, h.out_end, h.need_begin, h.need_end,
                         h.left, h.right});
        return out;
      },
      "n"_a, "parts"_a, "kernel"_a, "stride"_a, "padding"_a, "dilation"_a);
  m.def(
      "infer_space",
      [](const Partition& p, const std::vector<std::int64_t>& local, const std::string& dtype,
         bool requires_grad, const std::vector<int>& whole, const std::string& op) {
        std::string agreed;
        bool any_grad = false;
        auto space = infer(p, local, dtype, requires_grad, whole, op, &agreed, &any_grad);
        return std::make_tuple(space, agreed, any_grad);
      },
      "partition"_a, "local_shape"_a, "dtype"_a, "requires_grad"_a, "whole_axes"_a, "op"_a);
  m.def(
      "infer_space_mapped",
      [](const Partition& p, const std::vector<std::int64_t>& local, const std::string& dtype,
         bool requires_grad, const std::vector<int>& axis_map, const std::string& op) {
        std::string agreed;
        bool any_grad = false;
        auto space = infer_mapped(p, local, dtype, requires_grad, axis_map, op, &agreed, &any_grad);
        return std::make_tuple(space, agreed, any_grad);
      },
      "partition"_a, "local_shape"_a, "dtype"_a, "requires_grad"_a, "axis_map"_a, "op"_a,
      "The space of a tensor whose axis d is split by grid axis axis_map[d] (-1: whole) into the "
      "blocks the ranks hold; collective over the partition's parent.");
  m.def("shape_on_rank", &shape_on_rank, "comm"_a, "root"_a, "local_shape"_a, "dtype"_a,
        "requires_grad"_a, "op"_a);

  nb::class_<Operator>(m, "Operator")
      .def_prop_ro("domain", &Operator::domain)
      .def_prop_ro("range", &Operator::range)
      .def_prop_ro("name", &Operator::name)
      .def_prop_ro("dtype", &Operator::dtype_name)
      .def(
          "forward",
          [](const Operator& op, const Array& x, bool agreed, bool numpy) {
            return apply(op, x, false, agreed, numpy);
          },
          "x"_a, "agreed"_a = false, "numpy"_a = false)
      .def(
          "adjoint",
          [](const Operator& op, const Array& y, bool agreed, bool numpy) {
            return apply(op, y, true, agreed, numpy);
          },
          "y"_a, "agreed"_a = false, "numpy"_a = false)
      .def(
          "start_forward",
          [](const Operator& op, const Array& x, bool numpy) { return start(op, x, false, numpy); },
          "x"_a, "numpy"_a = false)
      .def(
          "start_adjoint",
          [](const Operator& op, const Array& y, bool numpy) { return start(op, y, true, numpy); },
          "y"_a, "numpy"_a = false)
      .def(
          "adjoint_test",
          [](const Operator& op, std::uint64_t seed, double tolerance) {
            auto run = [&]<class T>() {
              const double tol = tolerance > 0 ? tolerance : testing::adjoint_tolerance<T>();
              const auto r = testing::adjoint_test(op.get<T>(), seed, tol);
              return std::make_tuple(r.passed, r.forward_inner, r.adjoint_inner, r.relative_error,
                                     r.str());
            };
            return op.dtype == DType::f32 ? run.operator()<float>() : run.operator()<double>();
          },
          "seed"_a = 20261121, "tolerance"_a = 0.0);

  nb::class_<Transfer>(m, "Transfer")
      .def("wait", &Transfer::wait)
      .def_prop_ro("result", [](const Transfer& t) { return t.result; });

  m.def("broadcast", [](const std::string& dtype, const TensorSpace& src, const Partition& dst) {
    return make_operator<Broadcast>(dtype, src, dst);
  });
  m.def("sum_reduce", [](const std::string& dtype, const Partition& src, const TensorSpace& dst) {
    return make_operator<SumReduce>(dtype, src, dst);
  });
  m.def("all_sum_reduce",
        [](const std::string& dtype, const TensorSpace& space, const std::vector<int>& axes) {
          auto op = std::make_shared<Operator>();
          op->dtype = dtype_from_name(dtype);
          if (op->dtype == DType::f32) {
            op->all_sum_f = std::make_shared<AllSumReduce<float>>(space, axes);
            op->f = op->all_sum_f;
          } else {
            op->all_sum_d = std::make_shared<AllSumReduce<double>>(space, axes);
            op->d = op->all_sum_d;
          }
          return op;
        });
  m.def("gather", [](const std::string& dtype, const TensorSpace& src, int root) {
    return make_operator<Gather>(dtype, src, root);
  });
  m.def("scatter", [](const std::string& dtype, const TensorSpace& dst, int root) {
    return make_operator<Scatter>(dtype, dst, root);
  });
  m.def("all_gather",
        [](const std::string& dtype, const TensorSpace& split, const std::vector<int>& axes) {
          return make_operator<AllGather>(dtype, split, axes);
        });
  m.def("reduce_scatter",
        [](const std::string& dtype, const TensorSpace& split, const std::vector<int>& axes) {
          return make_operator<ReduceScatter>(dtype, split, axes);
        });
  m.def("repartition",
        [](const std::string& dtype, const TensorSpace& src, const TensorSpace& dst) {
          return make_operator<Repartition>(dtype, src, dst);
        });
  m.def("halo_exchange",
        [](const std::string& dtype, const TensorSpace& interior,
           const std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>>& widths) {
          return make_operator<HaloExchange>(dtype, interior, spec_from(widths));
        });
  m.def("halo_exchange_for_windows",
        [](const std::string& dtype, const TensorSpace& interior,
           const std::vector<std::int64_t>& kernel, const std::vector<std::int64_t>& stride,
           const std::vector<std::int64_t>& padding, const std::vector<std::int64_t>& dilation) {
          std::vector<ConvWindow> windows;
          for (std::size_t a = 0; a < kernel.size(); ++a)
            windows.push_back(ConvWindow{kernel[a], stride.at(a), padding.at(a), dilation.at(a)});
          return make_operator<HaloExchange>(dtype, interior, windows);
        });
  m.def("send_recv", [](const std::string& dtype, std::int64_t comm,
                        const std::vector<std::int64_t>& shape, int src, int dst) {
    auto op = std::make_shared<Operator>();
    op->dtype = dtype_from_name(dtype);
    MPI_Comm c = comm_from_handle(comm);
    if (op->dtype == DType::f32) {
      op->send_recv_f = std::make_shared<SendRecv<float>>(c, shape_of(shape), src, dst);
      op->f = op->send_recv_f;
    } else {
      op->send_recv_d = std::make_shared<SendRecv<double>>(c, shape_of(shape), src, dst);
      op->d = op->send_recv_d;
    }
    return op;
  });

  nb::class_<Extremum>(m, "Extremum");
  m.def(
      "extremum_forward",
      [](const TensorSpace& space, const std::vector<int>& axes, const Array& x, bool max,
         bool numpy) { return extremum_forward(space, axes, x, max, numpy); },
      "space"_a, "axes"_a, "x"_a, "max"_a, "numpy"_a = false);
  m.def(
      "extremum_backward",
      [](Extremum& e, const Array& dy, bool numpy) { return extremum_backward(e, dy, numpy); },
      "state"_a, "dy"_a, "numpy"_a = false);

  nb::class_<ContrastiveState>(m, "ContrastiveState");
  m.def("contrastive_forward", &contrastive_forward, "kind"_a, "a"_a, "b"_a, "logit_scale"_a,
        "logit_bias"_a, "temperature"_a, "comm"_a, "strategy"_a, "root"_a, "normalize"_a);
  m.def(
      "contrastive_backward",
      [](ContrastiveState& st, const Array& seed) { return contrastive_backward(st, seed); },
      "state"_a, "seed"_a);

  m.def(
      "assemble",
      [](const TensorSpace& space, const Array& x, int root, bool numpy) {
        return dtype_of(x, "assemble") == DType::f32 ? assemble_impl<float>(space, x, root, numpy)
                                                     : assemble_impl<double>(space, x, root, numpy);
      },
      "space"_a, "x"_a, "root"_a = 0, "numpy"_a = false);
  m.def(
      "distribute",
      [](const TensorSpace& space, const Array& global, bool numpy) {
        return dtype_of(global, "distribute") == DType::f32
                   ? distribute_impl<float>(space, global, numpy)
                   : distribute_impl<double>(space, global, numpy);
      },
      "space"_a, "global_tensor"_a, "numpy"_a = false);

  bind_layers(m);
}
