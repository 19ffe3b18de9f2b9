#include "distop/io/checkpoint.hpp"

#include <mpi.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <system_error>
#include <vector>

#include "distop/comm/agree.hpp"
#include "distop/comm/mpi.hpp"
#include "distop/core/error.hpp"
#include "distop/dist/assemble.hpp"

namespace distop::io {

namespace {

constexpr const char* kSaveOp = "save_checkpoint";
constexpr const char* kLoadOp = "load_checkpoint";
constexpr const char* kFormat = "distop.checkpoint";
constexpr const char* kVersion = "1";
constexpr const char* kReserved = "optimizer.";
constexpr const char* kMomentum = "optimizer.momentum.";
constexpr const char* kUser = "user.";

// Adds the bytes of `values` to a fingerprint, eight at a time.
template <class T>
void add_bytes(comm::Fingerprint& fp, const std::vector<T>& values) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
  const std::size_t n = values.size() * sizeof(T);
  fp.add(n);
  for (std::size_t i = 0; i < n; i += 8) {
    std::uint64_t word = 0;
    std::memcpy(&word, bytes + i, std::min<std::size_t>(8, n - i));
    fp.add(word);
  }
}

template <class T>
MPI_Comm parent_of(const NamedParameters<T>& parameters) {
  return parameters.empty() ? MPI_COMM_SELF
                            : parameters.front().second.space().partition().parent();
}

std::string momentum_name(const std::string& name) {
  std::string s(kMomentum);
  s += name;
  return s;
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// For each optimizer parameter, its index in `parameters`; checks the names on the way.
template <class T>
std::vector<std::size_t> match(const NamedParameters<T>& parameters, const optim::SGD<T>& optimizer,
                               const char* op) {
  std::set<std::string> names;
  for (const auto& [name, p] : parameters) {
    DISTOP_CHECK(!starts_with(name, kReserved), op, "the parameter name '", name, "' starts with '",
                 kReserved, "', which checkpoints reserve for the optimizer");
    DISTOP_CHECK(names.insert(name).second, op, "two parameters are named '", name, "'");
    DISTOP_CHECK(p.defined(), op, "parameter '", name, "' is an undefined Var");
  }
  std::vector<std::size_t> slot;
  const auto& ps = optimizer.parameters();
  for (std::size_t j = 0; j < ps.size(); ++j) {
    std::size_t i = 0;
    while (i < parameters.size() && !parameters[i].second.same_as(ps[j])) ++i;
    DISTOP_CHECK(i < parameters.size(), op, "optimizer parameter ", j, " (global shape ",
                 ps[j].space().global_shape().str(),
                 ") is none of the named parameters, so its state would have no name");
    slot.push_back(i);
  }
  return slot;
}

std::string exact(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

const std::string& field(const Metadata& m, const std::string& key, const std::string& path) {
  const auto it = m.find(key);
  DISTOP_CHECK(it != m.end(), kLoadOp, "checkpoint ", path, " has no metadata '", key, "'");
  return it->second;
}

template <class V>
V parse_number(const Metadata& m, const std::string& key, const std::string& path) {
  const std::string& s = field(m, key, path);
  V v{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  DISTOP_CHECK(ec == std::errc() && end == s.data() + s.size() && !s.empty(), kLoadOp,
               "checkpoint ", path, " has metadata '", key, "' = '", s, "', expected a number");
  return v;
}

double parse_double(const Metadata& m, const std::string& key, const std::string& path) {
  const std::string& s = field(m, key, path);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  DISTOP_CHECK(!s.empty() && end == s.c_str() + s.size(), kLoadOp, "checkpoint ", path,
               " has metadata '", key, "' = '", s, "', expected a number");
  return v;
}

bool parse_bool(const Metadata& m, const std::string& key, const std::string& path) {
  const std::string& s = field(m, key, path);
  DISTOP_CHECK(s == "true" || s == "false", kLoadOp, "checkpoint ", path, " has metadata '", key,
               "' = '", s, "', expected true or false");
  return s == "true";
}

}  // namespace

std::string checkpoint_path(const std::string& dir) {
  return (std::filesystem::path(dir) / "checkpoint.safetensors").string();
}

template <class T>
void save_checkpoint(const std::string& dir, const NamedParameters<T>& parameters,
                     const optim::SGD<T>& optimizer, const CheckpointInfo& info) {
  const MPI_Comm comm = parent_of(parameters);
  std::vector<std::size_t> slot;
  comm::agree(comm, kSaveOp, [&] { slot = match(parameters, optimizer, kSaveOp); });

  // A buffer is saved if any rank has it (ranks whose box is empty may never have stepped it);
  // a rank without one contributes zeros.
  const auto buffers = optimizer.momentum_buffers();
  std::vector<int> has(buffers.size());
  for (std::size_t j = 0; j < buffers.size(); ++j) has[j] = buffers[j].has_value() ? 1 : 0;
  if (!has.empty())
    DISTOP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, has.data(), static_cast<int>(has.size()), MPI_INT,
                                   MPI_MAX, comm),
                     kSaveOp);

  std::vector<std::string> names;
  std::vector<Shape> shapes;
  std::vector<std::vector<T>> globals;
  for (const auto& [name, p] : parameters) {
    names.push_back(name);
    shapes.push_back(p.space().global_shape());
    globals.push_back(assemble(p.value(), 0));
  }
  for (std::size_t j = 0; j < buffers.size(); ++j) {
    if (!has[j]) continue;
    const auto& [name, p] = parameters[slot[j]];
    DistTensor<T> buffer(p.space());
    if (buffers[j]) buffer.local().copy_from(*buffers[j]);
    names.push_back(momentum_name(name));
    shapes.push_back(p.space().global_shape());
    globals.push_back(assemble(buffer, 0));
  }

  const optim::SGDOptions& o = optimizer.options();
  Metadata metadata{{"format", kFormat},
                    {"format_version", kVersion},
                    {"epoch", std::to_string(info.epoch)},
                    {"step_in_epoch", std::to_string(info.step_in_epoch)},
                    {"global_step", std::to_string(info.global_step)},
                    {"seed", std::to_string(info.seed)},
                    {"optimizer", "SGD"},
                    {"sgd.lr", exact(o.lr)},
                    {"sgd.momentum", exact(o.momentum)},
                    {"sgd.dampening", exact(o.dampening)},
                    {"sgd.weight_decay", exact(o.weight_decay)},
                    {"sgd.nesterov", o.nesterov ? "true" : "false"}};
  for (const auto& [key, value] : info.metadata) {
    std::string user_key(kUser);
    user_key += key;
    metadata[user_key] = value;
  }

  int rank = 0;
  DISTOP_MPI_CHECK(MPI_Comm_rank(comm, &rank), kSaveOp);
  comm::agree(comm, kSaveOp, [&] {
    if (rank != 0) return;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    DISTOP_CHECK(!ec, kSaveOp, "cannot create the checkpoint directory ", dir, ": ", ec.message());
    std::vector<TensorEntry> entries;
    for (std::size_t i = 0; i < names.size(); ++i)
      entries.emplace_back(names[i], shapes[i], globals[i].data());
    write_safetensors(checkpoint_path(dir), entries, metadata);
  });
}

template <class T>
CheckpointInfo load_checkpoint(const std::string& dir, const NamedParameters<T>& parameters,
                               optim::SGD<T>& optimizer) {
  const std::string path = checkpoint_path(dir);
  CheckpointInfo info;
  optim::SGDOptions options;
  std::vector<std::vector<T>> weights;
  std::vector<std::optional<std::vector<T>>> momenta;  // per optimizer parameter
  std::vector<std::size_t> slot;
  comm::agree(parent_of(parameters), kLoadOp, [&] {
    slot = match(parameters, optimizer, kLoadOp);
    DISTOP_CHECK(std::filesystem::exists(path), kLoadOp, "no checkpoint: ", path,
                 " does not exist");
    const auto file = SafetensorsFile::open(path);
    const Metadata& m = file.metadata();
    const auto format = m.find("format");
    DISTOP_CHECK(format != m.end() && format->second == kFormat, kLoadOp, "file ", path,
                 " is a safetensors file but not a distop checkpoint (its metadata 'format' is "
                 "not '",
                 kFormat, "')");
    const std::string& version = field(m, "format_version", path);
    DISTOP_CHECK(version == kVersion, kLoadOp, "checkpoint ", path, " has format version ", version,
                 ", this distop reads version ", kVersion);
    const std::string& optimizer_name = field(m, "optimizer", path);
    DISTOP_CHECK(optimizer_name == "SGD", kLoadOp, "checkpoint ", path, " holds the state of a ",
                 optimizer_name, " optimizer, expected SGD");
    info.epoch = parse_number<std::int64_t>(m, "epoch", path);
    info.step_in_epoch = parse_number<std::int64_t>(m, "step_in_epoch", path);
    info.global_step = parse_number<std::int64_t>(m, "global_step", path);
    info.seed = parse_number<std::uint64_t>(m, "seed", path);
    for (const auto& [key, value] : m)
      if (starts_with(key, kUser)) info.metadata[key.substr(std::string(kUser).size())] = value;
    options.lr = parse_double(m, "sgd.lr", path);
    options.momentum = parse_double(m, "sgd.momentum", path);
    options.dampening = parse_double(m, "sgd.dampening", path);
    options.weight_decay = parse_double(m, "sgd.weight_decay", path);
    options.nesterov = parse_bool(m, "sgd.nesterov", path);
    // Checks the options now, so that set_options below cannot fail.
    (void)optim::SGD<T>(std::vector<Var<T>>{}, options);

    // Strict, as PyTorch's load_state_dict: the file holds exactly this model's tensors.
    std::set<std::string> expected;
    for (const auto& [name, p] : parameters) {
      expected.insert(name);
      DISTOP_CHECK(file.contains(name), kLoadOp, "checkpoint ", path, " has no tensor '", name,
                   "': is it a checkpoint of another model?");
      weights.push_back(file.read<T>(name, p.space().global_shape()));
    }
    for (std::size_t j = 0; j < slot.size(); ++j) {
      const auto& [name, p] = parameters[slot[j]];
      const std::string key = momentum_name(name);
      expected.insert(key);
      if (file.contains(key))
        momenta.emplace_back(file.read<T>(key, p.space().global_shape()));
      else
        momenta.emplace_back(std::nullopt);
    }
    for (const std::string& name : file.names())
      DISTOP_CHECK(expected.count(name) != 0, kLoadOp, "checkpoint ", path, " has tensor '", name,
                   "', which the model (or its optimizer) lacks: is it a checkpoint of another "
                   "model?");
  });

  // Every rank read the file on its own. A file replaced meanwhile (another run checkpointing into
  // the same directory) could give ranks different positions or weights, and training would part
  // ways; so the ranks compare what they read.
  comm::Fingerprint read;
  read.add(static_cast<std::uint64_t>(info.epoch))
      .add(static_cast<std::uint64_t>(info.step_in_epoch));
  read.add(static_cast<std::uint64_t>(info.global_step)).add(info.seed);
  for (const auto& w : weights) add_bytes(read, w);
  for (const auto& m : momenta)
    if (m) add_bytes(read, *m);
  comm::agree_on_fingerprint(parent_of(parameters), kLoadOp, read.value(), "",
                             "the ranks read different contents from checkpoint " + path +
                                 ": it changed while it was read (is another run writing to the "
                                 "same directory?)");

  // Every check has passed on every rank: from here on nothing can fail on one rank alone.
  std::vector<std::optional<Tensor<T>>> buffers(slot.size());
  for (std::size_t j = 0; j < slot.size(); ++j) {
    if (!momenta[j]) continue;
    DistTensor<T> buffer(parameters[slot[j]].second.space());
    distribute(*momenta[j], buffer);
    buffers[j] = buffer.local();
  }
  optimizer.set_momentum_buffers(buffers);
  optimizer.set_options(options);
  for (std::size_t i = 0; i < parameters.size(); ++i)
    distribute(weights[i], parameters[i].second.value());
  return info;
}

template void save_checkpoint(const std::string&, const NamedParameters<float>&,
                              const optim::SGD<float>&, const CheckpointInfo&);
template void save_checkpoint(const std::string&, const NamedParameters<double>&,
                              const optim::SGD<double>&, const CheckpointInfo&);
template CheckpointInfo load_checkpoint(const std::string&, const NamedParameters<float>&,
                                        optim::SGD<float>&);
template CheckpointInfo load_checkpoint(const std::string&, const NamedParameters<double>&,
                                        optim::SGD<double>&);

}  // namespace distop::io
