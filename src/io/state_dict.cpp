#include "distop/io/state_dict.hpp"

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "distop/comm/agree.hpp"
#include "distop/comm/mpi.hpp"
#include "distop/dist/assemble.hpp"

namespace distop::io {

namespace {

// The communicator a module's collectives run over: its first parameter's (or buffer's) parent.
template <class T>
MPI_Comm parent_of(const nn::Module<T>& module) {
  for (const auto& p : module.named_parameters()) return p.var.space().partition().parent();
  for (const auto& b : module.named_buffers())
    if (!b.count) return b.tensor.space().partition().parent();
  return MPI_COMM_SELF;
}

}  // namespace

template <class T>
void save_state_dict(const std::string& path, const nn::Module<T>& module,
                     const Metadata& metadata) {
  const auto params = module.named_parameters();
  auto buffers = module.named_buffers();
  // The state_dict's: the persistent buffers (a Dropout's call count is training state, for
  // checkpoints).
  std::erase_if(buffers, [](const nn::NamedBuffer<T>& b) { return !b.persistent; });
  // Assembled on parent rank 0 (collective), in the order of the entries below.
  std::vector<std::vector<T>> globals;
  std::vector<std::int64_t> counts;
  for (const auto& p : params) globals.push_back(assemble(p.var.value(), 0));
  for (const auto& b : buffers) {
    if (b.count)
      counts.push_back(*b.count);
    else
      globals.push_back(assemble(b.tensor, 0));
  }
  const MPI_Comm comm = parent_of(module);
  int rank = 0;
  DISTOP_MPI_CHECK(MPI_Comm_rank(comm, &rank), "save_state_dict");
  comm::agree(comm, "save_state_dict", [&] {
    if (rank != 0) return;
    std::vector<TensorEntry> entries;
    std::size_t g = 0, c = 0;
    for (const auto& p : params)
      entries.emplace_back(p.name, p.shape(), globals[g++].data());
    for (const auto& b : buffers) {
      if (b.count)
        entries.emplace_back(b.name, Shape{}, &counts[c++]);
      else
        entries.emplace_back(b.name, b.tensor.space().global_shape(), globals[g++].data());
    }
    Metadata with_checksums = metadata;
    add_checksums(entries, with_checksums);
    write_safetensors(path, entries, with_checksums);
  });
}

template <class T>
nn::StateDict<T> read_state_dict(const std::string& path) {
  auto file = SafetensorsFile::open(path);
  nn::StateDict<T> state;
  for (const auto& name : file.names()) {
    const std::string& dtype = file.dtype(name);
    nn::StateTensor<T> entry;
    entry.shape = file.shape(name);
    if (dtype == "F32" || dtype == "F64")
      entry.values = file.read_as<T>(name);
    else if (dtype == "I64")
      entry.values = file.read<std::int64_t>(name);
    else
      DISTOP_CHECK(false, "read_state_dict", "tensor '", name, "' of file ", path, " has dtype ",
                   dtype, "; a state_dict holds F32 or F64 tensors and I64 counts");
    state.emplace(name, std::move(entry));
  }
  return state;
}

template <class T>
nn::LoadResult load_state_dict(const std::string& path, nn::Module<T>& module, bool strict) {
  const MPI_Comm comm = parent_of(module);
  nn::LoadResult result;
  comm::agree(comm, "load_state_dict", [&] {
    try {
      result = module.load_state_dict(read_state_dict<T>(path), strict);
    } catch (const Error& e) {
      throw Error("load_state_dict", "file " + path + ": " + e.detail());
    }
  });
  return result;
}

#define DISTOP_INSTANTIATE(T)                                                               \
  template void save_state_dict(const std::string&, const nn::Module<T>&, const Metadata&); \
  template nn::StateDict<T> read_state_dict(const std::string&);                            \
  template nn::LoadResult load_state_dict(const std::string&, nn::Module<T>&, bool);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::io
