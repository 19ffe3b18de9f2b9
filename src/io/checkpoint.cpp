#include "distop/io/checkpoint.hpp"

#include <mpi.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>
#include <vector>

#include "distop/comm/agree.hpp"
#include "distop/comm/mpi.hpp"
#include "distop/core/error.hpp"
#include "distop/dist/assemble.hpp"

namespace distop::io {

namespace {

// A parameter and the name it has in the file ("fc1.weight", as in a PyTorch state_dict).
template <class T>
using NamedParameters = std::vector<std::pair<std::string, Var<T>>>;
template <class T>
using Buffers = std::vector<nn::NamedBuffer<T>>;

// A module's parameters under their hierarchical names, in registration order.
template <class T>
NamedParameters<T> named_parameters(const nn::Module<T>& module) {
  NamedParameters<T> named;
  for (auto& p : module.named_parameters()) named.emplace_back(std::move(p.name), std::move(p.var));
  return named;
}

constexpr const char* kSaveOp = "save_checkpoint";
constexpr const char* kLoadOp = "load_checkpoint";
constexpr const char* kFormat = "distop.checkpoint";
constexpr const char* kVersion = "2";
constexpr const char* kReserved = "optimizer.";
constexpr const char* kGroups = "optimizer.groups";
constexpr const char* kGroupPrefix = "optimizer.group.";
constexpr const char* kSchedulerStep = "scheduler.last_step";
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

void add_double(comm::Fingerprint& fp, double v) {
  std::uint64_t word = 0;
  std::memcpy(&word, &v, sizeof word);
  fp.add(word);
}

void add_string(comm::Fingerprint& fp, const std::string& s) {
  add_bytes(fp, std::vector<char>(s.begin(), s.end()));
}

template <class T>
MPI_Comm parent_of(const NamedParameters<T>& parameters) {
  return parameters.empty() ? MPI_COMM_SELF
                            : parameters.front().second.space().partition().parent();
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

// "optimizer.<key>.<name>" for state <key> of parameter <name>.
std::string state_name(const std::string& key, const std::string& name) {
  return kReserved + key + "." + name;
}

std::string group_prefix(std::size_t g) { return kGroupPrefix + std::to_string(g) + "."; }

// For each optimizer parameter, its index in `parameters`; checks the names on the way.
template <class T>
std::vector<std::size_t> match(const NamedParameters<T>& parameters,
                               const optim::Optimizer<T>& optimizer, const char* op) {
  std::set<std::string> names;
  for (const auto& [name, p] : parameters) {
    DISTOP_CHECK(!starts_with(name, kReserved), op, "the parameter name '", name, "' starts with '",
                 kReserved, "', which checkpoints reserve for the optimizer");
    DISTOP_CHECK(names.insert(name).second, op, "two parameters are named '", name, "'");
    DISTOP_CHECK(p.defined(), op, "parameter '", name, "' is an undefined Var");
  }
  std::vector<std::size_t> slot;
  const auto ps = optimizer.parameters();
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

// The names of group g's parameters as the checkpoint records them (a JSON array).
template <class T>
std::string group_names(const NamedParameters<T>& parameters, const std::vector<std::size_t>& slot,
                        const optim::Optimizer<T>& optimizer, std::size_t g) {
  std::size_t first = 0;
  for (std::size_t h = 0; h < g; ++h) first += optimizer.group_parameters(h).size();
  nlohmann::json names = nlohmann::json::array();
  for (std::size_t k = 0; k < optimizer.group_parameters(g).size(); ++k)
    names.push_back(parameters[slot[first + k]].first);
  return names.dump();
}

// A state key must survive "optimizer.<key>.<name>" and not be mistaken for the groups' entries.
void check_state_key(const std::string& key) {
  DISTOP_CHECK(
      !key.empty() && key.find('.') == std::string::npos && key != "group" && key != "groups",
      kSaveOp, "the optimizer state key '", key,
      "' cannot be saved: keys must be non-empty, without a dot, and not 'group' or "
      "'groups'");
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
V parse_number(const std::string& s, const std::string& key, const std::string& path) {
  V v{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  DISTOP_CHECK(ec == std::errc() && end == s.data() + s.size() && !s.empty(), kLoadOp,
               "checkpoint ", path, " has metadata '", key, "' = '", s, "', expected a number");
  return v;
}

template <class V>
V parse_number(const Metadata& m, const std::string& key, const std::string& path) {
  return parse_number<V>(field(m, key, path), key, path);
}

double parse_double(const Metadata& m, const std::string& key, const std::string& path) {
  const std::string& s = field(m, key, path);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  DISTOP_CHECK(!s.empty() && end == s.c_str() + s.size(), kLoadOp, "checkpoint ", path,
               " has metadata '", key, "' = '", s, "', expected a number");
  return v;
}

// Splits "<key>.<name>" (what follows "optimizer.") at its first dot.
std::pair<std::string, std::string> split_state(const std::string& rest, const std::string& entry,
                                                const std::string& path) {
  const auto dot = rest.find('.');
  DISTOP_CHECK(dot != std::string::npos && dot > 0 && dot + 1 < rest.size(), kLoadOp, "checkpoint ",
               path, " has '", entry,
               "', which is not of the form optimizer.<key>.<parameter name>");
  return {rest.substr(0, dot), rest.substr(dot + 1)};
}

}  // namespace

std::string checkpoint_path(const std::string& dir) {
  return (std::filesystem::path(dir) / "checkpoint.safetensors").string();
}

namespace {

// The buffers' names must be free too: not reserved, not a parameter's, not twice.
template <class T>
void check_buffer_names(const NamedParameters<T>& parameters, const Buffers<T>& buffers,
                        const char* op) {
  std::set<std::string> names;
  for (const auto& [name, p] : parameters) names.insert(name);
  for (const auto& b : buffers) {
    DISTOP_CHECK(!starts_with(b.name, kReserved), op, "the buffer name '", b.name,
                 "' starts with '", kReserved, "', which checkpoints reserve for the optimizer");
    DISTOP_CHECK(names.insert(b.name).second, op, "two parameters or buffers are named '", b.name,
                 "'");
  }
}

// Writes the checkpoint of `parameters` and `buffers` with the optimizer's state `state` (its
// state_dict(), which the caller gathered). Collective over the parameters' parent communicator.
template <class T>
void save_named(const std::string& dir, const NamedParameters<T>& parameters,
                const Buffers<T>& buffers, const optim::Optimizer<T>& optimizer,
                const optim::OptimizerState<T>& state, const CheckpointInfo& info) {
  const MPI_Comm comm = parent_of(parameters);
  std::vector<std::size_t> slot;
  std::vector<optim::StateKeys> keys;  // per optimizer parameter
  comm::agree(comm, kSaveOp, [&] {
    slot = match(parameters, optimizer, kSaveOp);
    check_buffer_names(parameters, buffers, kSaveOp);
    if (info.scheduler)
      DISTOP_CHECK(info.scheduler->base_lrs.size() == optimizer.group_count(), kSaveOp,
                   "the scheduler state has ", info.scheduler->base_lrs.size(),
                   " base learning rates, the optimizer ", optimizer.group_count(),
                   " parameter groups");
    DISTOP_CHECK(state.params.size() == slot.size(), kSaveOp, "the optimizer's state has ",
                 state.params.size(), " parameters, the optimizer ", slot.size());
    for (std::size_t j = 0; j < slot.size(); ++j) {
      keys.push_back(optimizer.state_keys(optimizer.group_of(j)));
      for (const auto& k : keys.back().tensors) check_state_key(k);
      for (const auto& k : keys.back().scalars) check_state_key(k);
      // Every rank must save the same tensors, so a state must be what state_keys() says.
      const auto& ps = state.params[j];
      if (ps.empty()) continue;
      DISTOP_CHECK(ps.tensors.size() == keys.back().tensors.size() &&
                       ps.scalars.size() == keys.back().scalars.size(),
                   kSaveOp, "the state of parameter '", parameters[slot[j]].first,
                   "' does not have the keys the optimizer's state_keys() gives");
      for (const auto& k : keys.back().tensors) {
        const auto it = ps.tensors.find(k);
        DISTOP_CHECK(it != ps.tensors.end() &&
                         it->second.shape() == parameters[slot[j]].second.value().local().shape(),
                     kSaveOp, "the state tensor '", k, "' of parameter '",
                     parameters[slot[j]].first, "' is missing or not of the box's shape");
      }
      for (const auto& k : keys.back().scalars)
        DISTOP_CHECK(ps.scalars.count(k) != 0, kSaveOp, "the state scalar '", k, "' of parameter '",
                     parameters[slot[j]].first, "' is missing");
    }
  });

  // Which ranks have each parameter's state, and its scalars, agreed over the ranks: the state is
  // taken from the ranks that hold a part of the parameter (any rank's if none of those has one).
  const std::size_t n = slot.size();
  std::vector<int> flags(3 * n);  // any rank has state; a rank with a box has; one lacks it
  for (std::size_t j = 0; j < n; ++j) {
    const bool has = !state.params[j].empty();
    const bool box = parameters[slot[j]].second.value().local_numel() > 0;
    flags[3 * j] = has;
    flags[3 * j + 1] = has && box;
    flags[3 * j + 2] = !has && box;
  }
  std::vector<double>
      scalars;  // per (j, scalar key): max over ranks with a box, -min, max over all
  constexpr double kNone = -std::numeric_limits<double>::infinity();
  for (std::size_t j = 0; j < n; ++j) {
    const bool box = parameters[slot[j]].second.value().local_numel() > 0;
    for (const auto& k : keys[j].scalars) {
      const auto& ps = state.params[j];
      const bool has = !ps.empty();
      const double v = has ? ps.scalars.at(k) : 0.0;
      scalars.push_back(has && box ? v : kNone);
      scalars.push_back(has && box ? -v : kNone);
      scalars.push_back(has ? v : kNone);
    }
  }
  if (n > 0)
    DISTOP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, flags.data(), static_cast<int>(flags.size()),
                                   MPI_INT, MPI_MAX, comm),
                     kSaveOp);
  if (!scalars.empty())
    DISTOP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, scalars.data(), static_cast<int>(scalars.size()),
                                   MPI_DOUBLE, MPI_MAX, comm),
                     kSaveOp);
  // The reduced values are the same on every rank, so are these checks.
  std::map<std::string, std::string> scalar_metadata;
  std::size_t s = 0;
  for (std::size_t j = 0; j < n; ++j) {
    const std::string& name = parameters[slot[j]].first;
    DISTOP_CHECK(!(flags[3 * j + 1] && flags[3 * j + 2]), kSaveOp, "parameter '", name,
                 "' has optimizer state on some of the ranks that hold a part of it and none on "
                 "others: their steps differed (a gradient missing on some ranks?)");
    for (const auto& k : keys[j].scalars) {
      const double high = scalars[s], low = -scalars[s + 1], any = scalars[s + 2];
      s += 3;
      if (!flags[3 * j]) continue;
      DISTOP_CHECK(!flags[3 * j + 1] || high == low, kSaveOp, "the optimizer state '", k,
                   "' of parameter '", name, "' differs between the ranks that hold it: from ", low,
                   " to ", high);
      scalar_metadata[state_name(k, name)] = exact(flags[3 * j + 1] ? high : any);
    }
  }

  std::vector<std::string> names;
  std::vector<Shape> shapes;
  std::vector<std::vector<T>> globals;
  for (const auto& [name, p] : parameters) {
    names.push_back(name);
    shapes.push_back(p.space().global_shape());
    globals.push_back(assemble(p.value(), 0));
  }
  std::vector<std::int64_t> counts;  // the buffers that are counts, in order
  counts.reserve(buffers.size());
  for (const auto& b : buffers) {
    if (b.count) {
      counts.push_back(*b.count);
    } else {
      names.push_back(b.name);
      shapes.push_back(b.tensor.space().global_shape());
      globals.push_back(assemble(b.tensor, 0));
    }
  }
  for (std::size_t j = 0; j < n; ++j) {
    if (!flags[3 * j]) continue;
    const auto& [name, p] = parameters[slot[j]];
    for (const auto& k : keys[j].tensors) {
      DistTensor<T> tensor(p.space());
      if (!state.params[j].empty()) tensor.local().copy_from(state.params[j].tensors.at(k));
      names.push_back(state_name(k, name));
      shapes.push_back(p.space().global_shape());
      globals.push_back(assemble(tensor, 0));
    }
  }

  Metadata metadata{{"format", kFormat},
                    {"format_version", kVersion},
                    {"epoch", std::to_string(info.epoch)},
                    {"step_in_epoch", std::to_string(info.step_in_epoch)},
                    {"global_step", std::to_string(info.global_step)},
                    {"seed", std::to_string(info.seed)},
                    {"optimizer", optimizer.name()},
                    {kGroups, std::to_string(optimizer.group_count())}};
  for (std::size_t g = 0; g < optimizer.group_count(); ++g) {
    metadata[group_prefix(g) + "params"] = group_names(parameters, slot, optimizer, g);
    for (const auto& [option, value] : state.groups[g])
      metadata[group_prefix(g) + option] = exact(value);
  }
  metadata.insert(scalar_metadata.begin(), scalar_metadata.end());
  if (info.scheduler) {
    metadata[kSchedulerStep] = std::to_string(info.scheduler->last_step);
    for (std::size_t g = 0; g < info.scheduler->base_lrs.size(); ++g)
      metadata["scheduler.base_lr." + std::to_string(g)] = exact(info.scheduler->base_lrs[g]);
  }
  for (const auto& [key, value] : info.metadata) metadata[kUser + key] = value;

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
    std::size_t c = 0;
    for (const auto& b : buffers)
      if (b.count) entries.emplace_back(b.name, Shape{}, &counts[c++]);
    add_checksums(entries, metadata);
    write_safetensors(checkpoint_path(dir), entries, metadata);
  });
}

template <class T>
CheckpointInfo load_named(const std::string& dir, const NamedParameters<T>& parameters,
                          const Buffers<T>& buffers, optim::Optimizer<T>& optimizer) {
  const std::string path = checkpoint_path(dir);
  CheckpointInfo info;
  std::vector<std::vector<T>> weights;
  std::vector<std::vector<T>> buffer_values;  // the tensor buffers, in order
  std::vector<std::int64_t> counts;           // the count buffers, in order
  optim::OptimizerState<T> state;
  comm::Fingerprint read;  // of what this rank read, to compare with the others
  comm::agree(parent_of(parameters), kLoadOp, [&] {
    const std::vector<std::size_t> slot = match(parameters, optimizer, kLoadOp);
    check_buffer_names(parameters, buffers, kLoadOp);
    std::map<std::string, std::size_t> index;  // optimizer parameter by name
    for (std::size_t j = 0; j < slot.size(); ++j) index[parameters[slot[j]].first] = j;
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
    DISTOP_CHECK(optimizer_name == optimizer.name(), kLoadOp, "checkpoint ", path,
                 " holds the state of optimizer ", optimizer_name,
                 ", which cannot be loaded into optimizer ", optimizer.name());
    info.epoch = parse_number<std::int64_t>(m, "epoch", path);
    info.step_in_epoch = parse_number<std::int64_t>(m, "step_in_epoch", path);
    info.global_step = parse_number<std::int64_t>(m, "global_step", path);
    info.seed = parse_number<std::uint64_t>(m, "seed", path);
    for (const auto& [key, value] : m)
      if (starts_with(key, kUser)) info.metadata[key.substr(std::string(kUser).size())] = value;
    if (m.count(kSchedulerStep) != 0) {
      optim::LRSchedulerState scheduler;
      scheduler.last_step = parse_number<std::int64_t>(m, kSchedulerStep, path);
      DISTOP_CHECK(scheduler.last_step >= 0, kLoadOp, "checkpoint ", path,
                   " has a negative scheduler step ", scheduler.last_step);
      for (std::size_t g = 0; g < optimizer.group_count(); ++g) {
        const std::string key = "scheduler.base_lr." + std::to_string(g);
        const double b = parse_double(m, key, path);
        DISTOP_CHECK(std::isfinite(b) && b >= 0, kLoadOp, "checkpoint ", path, " has metadata '",
                     key, "' = ", b, ", expected a finite learning rate >= 0");
        scheduler.base_lrs.push_back(b);
        add_double(read, b);
      }
      read.add(static_cast<std::uint64_t>(scheduler.last_step));
      info.scheduler = scheduler;
    }

    // Strict, as PyTorch's load_state_dict: the file holds exactly this model's tensors and its
    // optimizer's state.
    for (const auto& [name, p] : parameters) {
      DISTOP_CHECK(file.contains(name), kLoadOp, "checkpoint ", path, " has no tensor '", name,
                   "': is it a checkpoint of another model?");
      weights.push_back(file.read<T>(name, p.space().global_shape()));
      add_bytes(read, weights.back());
    }
    for (const auto& b : buffers) {
      DISTOP_CHECK(file.contains(b.name), kLoadOp, "checkpoint ", path, " has no tensor '", b.name,
                   "': is it a checkpoint of another model?");
      if (b.count) {
        counts.push_back(file.read<std::int64_t>(b.name, Shape{}).at(0));
        read.add(static_cast<std::uint64_t>(counts.back()));
      } else {
        buffer_values.push_back(file.read<T>(b.name, b.tensor.space().global_shape()));
        add_bytes(read, buffer_values.back());
      }
    }
    std::vector<std::pair<std::string, std::size_t>> state_tensors;  // name, optimizer parameter
    for (const std::string& name : file.names()) {
      const bool is_state = starts_with(name, kReserved);
      const auto it =
          is_state ? index.find(
                         split_state(name.substr(std::string(kReserved).size()), name, path).second)
                   : index.end();
      const bool known =
          is_state ? it != index.end()
                   : std::any_of(parameters.begin(), parameters.end(),
                                 [&](const auto& named) { return named.first == name; }) ||
                         std::any_of(buffers.begin(), buffers.end(),
                                     [&](const auto& b) { return b.name == name; });
      DISTOP_CHECK(known, kLoadOp, "checkpoint ", path, " has tensor '", name,
                   "', which the model (or its optimizer) lacks: is it a checkpoint of another "
                   "model?");
      if (is_state) state_tensors.emplace_back(name, it->second);
    }

    // The optimizer's groups, their options and the parameters' scalar state.
    const auto groups = parse_number<std::uint64_t>(m, kGroups, path);
    DISTOP_CHECK(groups == optimizer.group_count(), kLoadOp, "checkpoint ", path, " holds ", groups,
                 " parameter groups of its optimizer, this optimizer has ",
                 optimizer.group_count());
    state.optimizer = optimizer_name;
    state.groups.resize(optimizer.group_count());
    state.params.resize(slot.size());
    for (std::size_t g = 0; g < optimizer.group_count(); ++g) {
      const std::string& saved = field(m, group_prefix(g) + "params", path);
      const std::string mine = group_names(parameters, slot, optimizer, g);
      DISTOP_CHECK(saved == mine, kLoadOp, "checkpoint ", path, ": parameter group ", g,
                   " holds the parameters ", saved, ", this optimizer's ", mine);
    }
    // Every other "optimizer." entry is a group option or a parameter's scalar state.
    for (const auto& [key, value] : m) {
      if (!starts_with(key, kReserved) || key == kGroups) continue;
      if (starts_with(key, kGroupPrefix)) {
        const std::string rest = key.substr(std::string(kGroupPrefix).size());
        const auto dot = rest.find('.');
        DISTOP_CHECK(dot != std::string::npos, kLoadOp, "checkpoint ", path, " has metadata '", key,
                     "', expected optimizer.group.<g>.<option>");
        const auto g = parse_number<std::uint64_t>(rest.substr(0, dot), key, path);
        DISTOP_CHECK(g < state.groups.size(), kLoadOp, "checkpoint ", path, " has metadata '", key,
                     "' of a parameter group it does not have");
        const std::string option = rest.substr(dot + 1);
        if (option == "params") continue;  // compared above
        const double v = parse_double(m, key, path);
        state.groups[g][option] = v;
        add_string(read, key);
        add_double(read, v);
        continue;
      }
      const auto [state_key, name] =
          split_state(key.substr(std::string(kReserved).size()), key, path);
      const auto it = index.find(name);
      DISTOP_CHECK(it != index.end(), kLoadOp, "checkpoint ", path, " has optimizer state '", key,
                   "' of a parameter '", name, "' that the optimizer lacks");
      const double v = parse_double(m, key, path);
      state.params[it->second].scalars[state_key] = v;
      add_string(read, key);
      add_double(read, v);
    }

    // The state tensors: this rank's boxes of them.
    for (const auto& [name, j] : state_tensors) {
      const auto& p = parameters[slot[j]].second;
      const auto global = file.read<T>(name, p.space().global_shape());
      add_string(read, name);
      add_bytes(read, global);
      DistTensor<T> box(p.space());
      distribute(global, box);
      state.params[j]
          .tensors[split_state(name.substr(std::string(kReserved).size()), name, path).first] =
          box.local();
    }
    optimizer.check_state_dict(state);
  });

  // Every rank read the file on its own. A file replaced meanwhile (another run checkpointing into
  // the same directory) could give ranks different positions, weights or state, and training would
  // part ways; so the ranks compare what they read.
  read.add(static_cast<std::uint64_t>(info.epoch))
      .add(static_cast<std::uint64_t>(info.step_in_epoch));
  read.add(static_cast<std::uint64_t>(info.global_step)).add(info.seed);
  comm::agree_on_fingerprint(parent_of(parameters), kLoadOp, read.value(), "",
                             "the ranks read different contents from checkpoint " + path +
                                 ": it changed while it was read (is another run writing to the "
                                 "same directory?)");

  // Every check has passed on every rank: from here on nothing can fail on one rank alone.
  optimizer.load_state_dict(state);
  for (std::size_t i = 0; i < parameters.size(); ++i)
    distribute(weights[i], parameters[i].second.value());
  std::size_t t = 0, c = 0;
  for (const auto& b : buffers) {
    if (b.count) {
      *b.count = counts[c++];
    } else {
      DistTensor<T> box = b.tensor;  // a handle on the buffer's storage
      distribute(buffer_values[t++], box);
    }
  }
  return info;
}

}  // namespace

template <class T>
void save_checkpoint(const std::string& dir, const nn::Module<T>& model,
                     const optim::Optimizer<T>& optimizer, const CheckpointInfo& info) {
  const auto parameters = named_parameters(model);
  optim::OptimizerState<T> state;
  comm::agree(parent_of(parameters), kSaveOp, [&] { state = optimizer.state_dict(); });
  save_named(dir, parameters, model.named_buffers(), optimizer, state, info);
}

template <class T>
CheckpointInfo load_checkpoint(const std::string& dir, nn::Module<T>& model,
                               optim::Optimizer<T>& optimizer) {
  return load_named(dir, named_parameters(model), model.named_buffers(), optimizer);
}

template <class T>
void save_checkpoint(const std::string& dir, const parallel::DataParallel<T>& model,
                     const optim::Optimizer<T>& optimizer, const CheckpointInfo& info) {
  const parallel::Replicas& replicas = model.replicas();
  optim::OptimizerState<T> state;
  // Every rank: a sharded optimizer gathers its state over the replicas.
  comm::agree(replicas.world(), kSaveOp, [&] { state = optimizer.state_dict(); });
  // Replica 0 writes; its errors are every replica's.
  comm::agree(replicas.world(), kSaveOp, [&] {
    if (replicas.index() == 0)
      save_named(dir, named_parameters(model.module()), model.module().named_buffers(), optimizer,
                 state, info);
  });
}

template <class T>
CheckpointInfo load_checkpoint(const std::string& dir, parallel::DataParallel<T>& model,
                               optim::Optimizer<T>& optimizer) {
  // Every replica reads the file (the replicas then hold the same state, as after a broadcast).
  CheckpointInfo info;
  comm::agree(model.replicas().world(), kLoadOp,
              [&] { info = load_checkpoint(dir, model.module(), optimizer); });
  return info;
}

#define DISTOP_INSTANTIATE(T)                                                             \
  template void save_checkpoint(const std::string&, const nn::Module<T>&,                 \
                                const optim::Optimizer<T>&, const CheckpointInfo&);       \
  template CheckpointInfo load_checkpoint(const std::string&, nn::Module<T>&,             \
                                          optim::Optimizer<T>&);                          \
  template void save_checkpoint(const std::string&, const parallel::DataParallel<T>&,     \
                                const optim::Optimizer<T>&, const CheckpointInfo&);       \
  template CheckpointInfo load_checkpoint(const std::string&, parallel::DataParallel<T>&, \
                                          optim::Optimizer<T>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::io
