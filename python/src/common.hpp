#pragma once
// What the translation units of distop._core share: arrays across the DLPack boundary without a
// copy, dtypes, and tensor spaces inferred from every rank's local shape.

#include <mpi.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "distop/comm/collectives.hpp"
#include "distop/core/environment.hpp"
#include "distop/core/error.hpp"
#include "distop/core/mpi_check.hpp"
#include "distop/core/tensor.hpp"
#include "distop/dist/decomposition.hpp"
#include "distop/dist/dist_tensor.hpp"
#include "distop/dist/partition.hpp"
#include "distop/dist/tensor_space.hpp"

namespace distop::python {

namespace nb = nanobind;

// Arrays of any device cross the boundary; wrap() accepts those in the memory this build's tensors
// live in (tensor_device()) and refuses the others.
using Array = nb::ndarray<nb::c_contig>;

#if DISTOP_DEVICE_MEMORY_SPACE && !defined(KOKKOS_ENABLE_CUDA)
#error "distop's Python package takes a host build or a CUDA build of distop"
#endif

// Where this build's tensors live, in DLPack's terms: host memory (kDLCPU) in a host build; in a
// CUDA build (Kokkos with CUDA) the GPU this rank computes on (kDLCUDA and its index, the device
// Environment chose for the rank).
struct TensorDevice {
  int type = nb::device::cpu::value;
  int id = 0;
};

inline TensorDevice tensor_device() {
#if DISTOP_DEVICE_MEMORY_SPACE
  return {nb::device::cuda::value, ExecSpace().cuda_device()};
#else
  return {};
#endif
}

inline std::string device_text(int type, int id) {
  if (type == nb::device::cpu::value) return "in host memory";
  if (type == nb::device::cuda::value) return "on CUDA device " + std::to_string(id);
  return "on a device of DLPack type " + std::to_string(type);
}

// An Error unless `a` lies where this build's tensors live.
inline void check_device(const Array& a, const std::string& op) {
  const auto d = tensor_device();
  const int type = static_cast<int>(a.device_type()), id = static_cast<int>(a.device_id());
  if (type == d.type && (d.type == nb::device::cpu::value || id == d.id)) return;
  throw Error(op, "the tensor is " + device_text(type, id) + "; this distop build takes tensors " +
                      device_text(d.type, d.id) +
                      (d.type == nb::device::cpu::value ? " (CPU tensors, numpy arrays)"
                                                        : " (this rank's GPU: distop.device())"));
}

// A communicator from its Fortran handle (mpi4py's comm.py2f(); world_handle() for
// MPI_COMM_WORLD), which is an int whatever MPI_Comm is.
inline MPI_Comm comm_from_handle(std::int64_t fortran_handle) {
  return MPI_Comm_f2c(static_cast<MPI_Fint>(fortran_handle));
}

inline Shape shape_of(const std::vector<std::int64_t>& extents) { return Shape(extents); }
inline std::vector<std::int64_t> extents_of(const Shape& s) {
  return std::vector<std::int64_t>(s.begin(), s.end());
}

enum class DType { f32 = 0, f64 = 1 };

inline DType dtype_of(const Array& a, const std::string& op) {
  if (a.dtype() == nb::dtype<float>()) return DType::f32;
  if (a.dtype() == nb::dtype<double>()) return DType::f64;
  throw Error(op, "only float32 and float64 tensors are supported");
}

inline DType dtype_from_name(const std::string& name) {
  if (name == "float32") return DType::f32;
  if (name == "float64") return DType::f64;
  throw Error("distop", "dtype must be 'float32' or 'float64', not '" + name + "'");
}

// A distop Tensor over the array's memory; the array (and so the Python object behind it) lives
// as long as the Tensor's storage does.
template <class T>
Tensor<T> wrap(const Array& a, const std::string& op = "distop") {
  check_device(a, op);
  std::vector<std::int64_t> extents(a.ndim());
  for (std::size_t i = 0; i < a.ndim(); ++i) extents[i] = static_cast<std::int64_t>(a.shape(i));
  auto owner = std::make_shared<Array>(a);
  return Tensor<T>::wrap(static_cast<T*>(a.data()), Shape(extents), std::move(owner));
}

// An array over t's memory (where this build's tensors live), owned by a capsule holding a copy of
// t (sharing its storage). numpy: a numpy array, which a CUDA build cannot give.
template <class T>
nb::object to_array(const Tensor<T>& t, bool numpy) {
  const auto d = tensor_device();
  DISTOP_CHECK(!numpy || d.type == nb::device::cpu::value, "distop",
               "this distop build keeps its tensors on the GPU, and a numpy array is host memory; "
               "pass torch tensors");
  auto* keep = new Tensor<T>(t);
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<Tensor<T>*>(p); });
  std::vector<std::size_t> shape(t.shape().begin(), t.shape().end());
  // A null pointer makes some consumers unhappy even for no entries.
  static T dummy{};
  T* data = t.numel() > 0 ? t.data() : &dummy;
  if (numpy) return nb::ndarray<nb::numpy, T>(data, shape.size(), shape.data(), owner).cast();
  return nb::ndarray<nb::pytorch, T>(data, shape.size(), shape.data(), owner, nullptr,
                                     nb::dtype<T>(), d.type, d.id)
      .cast();
}

// x as a DistTensor of `space`. `agreed`: every rank's local shape is known to be the space's
// (checked collectively before), so no further messages; otherwise the collective check.
template <class T>
DistTensor<T> dist(const TensorSpace& space, const Array& a, bool agreed) {
  auto local = wrap<T>(a);
  if (agreed) return DistTensor<T>::from_local(space, std::move(local));
  return DistTensor<T>(space, std::move(local));
}

// Completes a nonblocking collective with distop's own wait (comm::Request): where the ranks
// outnumber the cores (yield_when_idle(), core/environment.hpp) it yields the processor between
// tests, so that a waiting rank lets the others run (a blocking MPI collective would poll), and
// the hang watchdog sees it as one wait.
inline void complete(MPI_Request& request) {
  comm::Request(comm::Request::Kind::kCollective, request).wait();
  request = MPI_REQUEST_NULL;
}

// MPI_Allgather and MPI_Allreduce of int64 and double values, completed as `complete` does.
inline void allgather(const std::int64_t* send, int count, std::int64_t* recv, MPI_Comm comm,
                      const std::string& op) {
  MPI_Request r = MPI_REQUEST_NULL;
  DISTOP_MPI_CHECK(MPI_Iallgather(send, count, MPI_INT64_T, recv, count, MPI_INT64_T, comm, &r),
                   op);
  complete(r);
}
// `send` may be MPI_IN_PLACE.
template <class T>
void allreduce(const void* send, T* recv, int count, MPI_Op reduction, MPI_Comm comm,
               const std::string& op) {
  static_assert(std::is_same_v<T, double> || std::is_same_v<T, std::int64_t>);
  const MPI_Datatype type = std::is_same_v<T, double> ? MPI_DOUBLE : MPI_INT64_T;
  MPI_Request r = MPI_REQUEST_NULL;
  DISTOP_MPI_CHECK(MPI_Iallreduce(send, recv, count, type, reduction, comm, &r), op);
  complete(r);
}

// ---- Spaces inferred from every rank's local shape (one allgather over the parent)

constexpr int kMaxRank = 8;

struct Agreed {
  std::vector<std::vector<std::int64_t>> shapes;  // per parent rank; empty for inactive ranks
  DType dtype = DType::f64;
  bool requires_grad = false;  // on any rank
};

// Every rank's local shape and dtype, and whether any rank's input requires a gradient,
// gathered over `parent`; `active` says whether this rank's shape counts. The same on every rank,
// and so are the errors raised from it.
inline Agreed agree(MPI_Comm parent, const std::vector<std::int64_t>& local,
                    const std::string& dtype, bool requires_grad, bool active,
                    const std::string& op) {
  int size = 0;
  DISTOP_MPI_CHECK(MPI_Comm_size(parent, &size), op);
  constexpr std::size_t head = 4;
  std::vector<std::int64_t> mine(head + kMaxRank, 0), all;
  const bool known = dtype == "float32" || dtype == "float64";
  // The Python side names a tensor in the wrong memory "device <where>" instead of its dtype.
  const bool elsewhere = dtype.rfind("device ", 0) == 0;
  mine[0] = elsewhere ? 3 : known ? (dtype == "float32" ? 0 : 1) : 2;
  mine[1] = static_cast<std::int64_t>(local.size());
  mine[2] = active ? 1 : 0;
  mine[3] = requires_grad ? 1 : 0;
  for (std::size_t i = 0; i < local.size() && i < kMaxRank; ++i) mine[head + i] = local[i];
  all.resize(mine.size() * static_cast<std::size_t>(size));
  allgather(mine.data(), static_cast<int>(mine.size()), all.data(), parent, op);
  Agreed out;
  out.shapes.resize(static_cast<std::size_t>(size));
  std::int64_t dt = -1;
  for (int r = 0; r < size; ++r) {
    const auto* row = all.data() + mine.size() * static_cast<std::size_t>(r);
    DISTOP_CHECK(row[0] != 3, op, "rank ", r,
                 " passes a tensor in another memory than distop's: this build takes tensors ",
                 tensor_device().type == nb::device::cpu::value
                     ? "in host memory (CPU tensors, numpy arrays)"
                     : "on each rank's own GPU (distop.device())");
    DISTOP_CHECK(row[0] != 2, op, "rank ", r,
                 " passes a tensor that is neither float32 nor float64");
    DISTOP_CHECK(dt < 0 || row[0] == dt, op,
                 "the ranks pass tensors of different dtypes (float32 "
                 "and float64); every rank must pass the same dtype");
    dt = row[0];
    DISTOP_CHECK(row[1] <= kMaxRank, op, "rank ", r, " passes a tensor of ", row[1],
                 " dimensions; at most ", kMaxRank, " are supported");
    if (row[3]) out.requires_grad = true;
    if (row[2]) out.shapes[static_cast<std::size_t>(r)].assign(row + head, row + head + row[1]);
  }
  out.dtype = dt == 0 ? DType::f32 : DType::f64;
  return out;
}

inline std::string shape_text(const std::vector<std::int64_t>& s) { return Shape(s).str(); }

// The space of a tensor on `p` whose ranks hold the given local boxes: tensor axis d split by grid
// axis axis_map[d] into the blocks the ranks hold, or whole where axis_map[d] is -1 (grid axes that
// split no tensor axis replicate it). Balanced where the blocks are.
inline TensorSpace infer_mapped(const Partition& p, const std::vector<std::int64_t>& local,
                                const std::string& dtype, bool requires_grad,
                                const std::vector<int>& axis_map, const std::string& op,
                                std::string* agreed_dtype, bool* any_requires_grad,
                                const std::string& dimensions_rule = "") {
  const auto a = agree(p.parent(), local, dtype, requires_grad, p.active(), op);
  *agreed_dtype = a.dtype == DType::f32 ? "float32" : "float64";
  *any_requires_grad = a.requires_grad;
  const int dim = static_cast<int>(axis_map.size());
  const auto& ranks = p.ranks();
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const auto& s = a.shapes[static_cast<std::size_t>(ranks[i])];
    DISTOP_CHECK(static_cast<int>(s.size()) == dim, op, "rank ", ranks[i], " of ", p.str(),
                 " passes a tensor of shape ", shape_text(s), ", with ", s.size(), " dimensions; ",
                 dimensions_rule.empty()
                     ? "the layer takes tensors of " + std::to_string(dim) + " dimensions"
                     : dimensions_rule);
  }
  std::vector<std::vector<std::int64_t>> extents(static_cast<std::size_t>(dim));
  std::vector<std::int64_t> global(static_cast<std::size_t>(dim));
  const auto& grid = p.shape();
  for (int d = 0; d < dim; ++d) {
    const int g = axis_map[static_cast<std::size_t>(d)];
    const std::int64_t parts = g < 0 ? 1 : grid[g];
    for (std::int64_t c = 0; c < parts; ++c) {
      std::vector<int> coords(static_cast<std::size_t>(p.dim()), 0);
      if (g >= 0) coords[static_cast<std::size_t>(g)] = static_cast<int>(c);
      extents[static_cast<std::size_t>(d)].push_back(
          a.shapes[static_cast<std::size_t>(p.rank_at(coords))][static_cast<std::size_t>(d)]);
    }
    global[static_cast<std::size_t>(d)] = 0;
    for (auto e : extents[static_cast<std::size_t>(d)]) global[static_cast<std::size_t>(d)] += e;
  }
  const Shape g(global);
  // Blocks must be non-empty: Decomposition says so in its own words.
  auto decomposition = Decomposition::blocks(g, grid, extents, axis_map);
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const auto expected = decomposition.local_shape(p.coords_of(static_cast<int>(i)));
    const auto& s = a.shapes[static_cast<std::size_t>(ranks[i])];
    DISTOP_CHECK(Shape(s) == expected, op, "rank ", ranks[i], " of ", p.str(),
                 " holds a block of shape ", shape_text(s),
                 " where the blocks of the other ranks imply ", expected.str(),
                 " for a tensor of global shape ", g.str());
  }
  if (decomposition.balanced()) decomposition = Decomposition::balanced(g, grid, axis_map);
  return TensorSpace(p, decomposition);
}

// infer_mapped with tensor axis d on grid axis d (the tensor has the partition's dimensions),
// except the tensor axes in `whole`, which no grid axis splits.
inline TensorSpace infer(const Partition& p, const std::vector<std::int64_t>& local,
                         const std::string& dtype, bool requires_grad,
                         const std::vector<int>& whole, const std::string& op,
                         std::string* agreed_dtype, bool* any_requires_grad) {
  std::vector<int> axis_map(static_cast<std::size_t>(p.dim()));
  for (int d = 0; d < p.dim(); ++d)
    axis_map[static_cast<std::size_t>(d)] =
        std::find(whole.begin(), whole.end(), d) != whole.end() ? -1 : d;
  return infer_mapped(
      p, local, dtype, requires_grad, axis_map, op, agreed_dtype, any_requires_grad,
      "the tensor must have as many dimensions as the partition (" + std::to_string(p.dim()) + ")");
}

}  // namespace distop::python
