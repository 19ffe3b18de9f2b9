#include "distop/io/parameters.hpp"

#include "distop/comm/agree.hpp"
#include "distop/dist/assemble.hpp"

namespace distop::io {

namespace {
template <class T>
MPI_Comm parent_of(const NamedParameters<T>& parameters) {
  return parameters.empty() ? MPI_COMM_SELF : parameters.front().second.space().partition().parent();
}
}  // namespace

template <class T>
void save_parameters(const std::string& path, const NamedParameters<T>& parameters,
                     const Metadata& metadata) {
  std::vector<std::vector<T>> globals;
  for (const auto& [name, p] : parameters) globals.push_back(assemble(p.value(), 0));
  const auto comm = parent_of(parameters);
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  comm::agree(comm, "save_parameters", [&] {
    if (rank != 0) return;
    std::vector<TensorEntry> entries;
    for (std::size_t i = 0; i < parameters.size(); ++i)
      entries.emplace_back(parameters[i].first, parameters[i].second.space().global_shape(),
                           globals[i].data());
    Metadata with_checksums = metadata;
    add_checksums(entries, with_checksums);
    write_safetensors(path, entries, with_checksums);
  });
}

template <class T>
void load_parameters(const std::string& path, const NamedParameters<T>& parameters) {
  std::vector<std::vector<T>> globals;
  comm::agree(parent_of(parameters), "load_parameters", [&] {
    auto file = SafetensorsFile::open(path);
    for (const auto& [name, p] : parameters) {
      DISTOP_CHECK(file.contains(name), "load_parameters", "file ", path, " has no tensor '",
                   name, "'");
      globals.push_back(file.read<T>(name, p.space().global_shape()));
    }
  });
  for (std::size_t i = 0; i < parameters.size(); ++i)
    distribute(globals[i], parameters[i].second.value());
}

template void save_parameters(const std::string&, const NamedParameters<float>&, const Metadata&);
template void save_parameters(const std::string&, const NamedParameters<double>&, const Metadata&);
template void load_parameters(const std::string&, const NamedParameters<float>&);
template void load_parameters(const std::string&, const NamedParameters<double>&);

}  // namespace distop::io
