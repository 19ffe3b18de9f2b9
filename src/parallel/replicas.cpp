#include "distop/parallel/replicas.hpp"

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "distop/comm/agree.hpp"
#include "distop/comm/mpi.hpp"

namespace distop::parallel {

int Replicas::spanned(const Partition& p) const {
  constexpr const char* op = "Replicas::spanned";
  MPI_Group parent = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  DISTOP_MPI_CHECK(MPI_Comm_group(p.parent(), &parent), op);
  DISTOP_MPI_CHECK(MPI_Comm_group(world_, &world), op);
  std::vector<int> in_world(p.ranks().size());
  const int translated = MPI_Group_translate_ranks(parent, static_cast<int>(p.ranks().size()),
                                                   p.ranks().data(), world, in_world.data());
  // Freeing a group handle releases a local object; its result says nothing worth reporting.
  MPI_Group_free(&parent);
  MPI_Group_free(&world);
  DISTOP_MPI_CHECK(translated, op);
  std::set<int> replicas;
  for (const int r : in_world) {
    DISTOP_CHECK(r != MPI_UNDEFINED, op, "a rank of the partition is not a rank of the replicas");
    replicas.insert(r / model_ranks_);
  }
  return static_cast<int>(replicas.size());
}

Replicas::Replicas(MPI_Comm world, int replicas) : world_(world), count_(replicas) {
  constexpr const char* op = "Replicas";
  int size = 0, rank = 0;
  DISTOP_MPI_CHECK(MPI_Comm_size(world, &size), op);
  DISTOP_MPI_CHECK(MPI_Comm_rank(world, &rank), op);
  std::string problem;
  if (replicas < 1)
    problem = "the replica count must be at least 1, found " + std::to_string(replicas);
  else if (size % replicas != 0)
    problem = std::to_string(replicas) + " replicas do not divide the " + std::to_string(size) +
              " ranks evenly (each replica is a model over the same number of ranks)";
  comm::agree_on_arguments(world, op,
                           comm::Fingerprint().add(static_cast<std::uint64_t>(replicas)).value(),
                           problem, std::to_string(replicas) + " replicas");
  model_ranks_ = size / replicas;
  index_ = rank / model_ranks_;
  DISTOP_MPI_CHECK(MPI_Comm_split(world, index_, rank, &model_comm_), op);
  DISTOP_MPI_CHECK(MPI_Comm_split(world, rank % model_ranks_, rank, &reduction_comm_), op);
}

Replicas::Replicas(Replicas&& other) noexcept
    : world_(other.world_),
      model_comm_(std::exchange(other.model_comm_, MPI_COMM_NULL)),
      reduction_comm_(std::exchange(other.reduction_comm_, MPI_COMM_NULL)),
      count_(other.count_),
      index_(other.index_),
      model_ranks_(other.model_ranks_) {}

Replicas& Replicas::operator=(Replicas&& other) noexcept {
  if (this != &other) {
    this->~Replicas();
    new (this) Replicas(std::move(other));
  }
  return *this;
}

Replicas::~Replicas() {
  // Not collective under MPICH (a communicator is freed locally once its operations are done);
  // skipped after MPI_Finalize. Unchecked: a destructor never throws (a failed free leaks).
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (model_comm_ != MPI_COMM_NULL) MPI_Comm_free(&model_comm_);
  if (reduction_comm_ != MPI_COMM_NULL) MPI_Comm_free(&reduction_comm_);
}

}  // namespace distop::parallel
