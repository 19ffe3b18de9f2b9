#include "distop/optim/optimizer.hpp"

#include <mpi.h>

#include <cstdio>
#include <mutex>
#include <set>
#include <utility>

#include "distop/core/error.hpp"

namespace distop::optim {

template <class T>
Optimizer<T>::Optimizer(std::vector<std::vector<Var<T>>> groups, const std::string& op)
    : groups_(std::move(groups)) {
  // As torch: a parameter in two groups (or twice in one) would be updated twice per step.
  std::vector<const Var<T>*> seen;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    for (std::size_t i = 0; i < groups_[g].size(); ++i) {
      const Var<T>& p = groups_[g][i];
      DISTOP_CHECK(p.defined(), op, "parameter ", i, " of group ", g,
                   " is an undefined (default-constructed) Var");
      for (const Var<T>* q : seen)
        DISTOP_CHECK(!q->same_as(p), op, "parameter ", i, " of group ", g,
                     " appears more than once among the optimizer's parameters");
      seen.push_back(&p);
    }
  }
}

template <class T>
void Optimizer<T>::check_group(std::size_t g, const char* op) const {
  DISTOP_CHECK(g < groups_.size(), op, "no parameter group ", g, ": the optimizer has ",
               groups_.size());
}

template <class T>
void Optimizer<T>::zero_grad() {
  for (auto& group : groups_)
    for (auto& p : group) p.zero_grad();
}

template <class T>
const std::vector<Var<T>>& Optimizer<T>::group_parameters(std::size_t g) const {
  check_group(g, "Optimizer::group_parameters");
  return groups_[g];
}

template <class T>
std::vector<Var<T>> Optimizer<T>::parameters() const {
  std::vector<Var<T>> all;
  for (const auto& group : groups_) all.insert(all.end(), group.begin(), group.end());
  return all;
}

template <class T>
std::size_t Optimizer<T>::parameter_count() const noexcept {
  std::size_t n = 0;
  for (const auto& group : groups_) n += group.size();
  return n;
}

template <class T>
std::size_t Optimizer<T>::group_of(std::size_t i) const {
  const std::size_t n = i;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    if (i < groups_[g].size()) return g;
    i -= groups_[g].size();
  }
  DISTOP_CHECK(false, "Optimizer::group_of", "no parameter ", n, ": the optimizer has ",
               parameter_count());
  return 0;
}

template <class T>
double Optimizer<T>::lr(std::size_t g) const {
  check_group(g, "Optimizer::lr");
  return group_lr(g);
}

template <class T>
void Optimizer<T>::set_lr(std::size_t g, double lr) {
  check_group(g, "Optimizer::set_lr");
  set_group_lr(g, lr);
}

template <class T>
void Optimizer<T>::set_lr(double lr) {
  // Checked on a copy first: an invalid lr leaves every group as it was.
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const double old = group_lr(g);
    set_group_lr(g, lr);
    set_group_lr(g, old);
  }
  for (std::size_t g = 0; g < groups_.size(); ++g) set_group_lr(g, lr);
}

template class Optimizer<float>;
template class Optimizer<double>;

bool warn_once(const std::string& key, const std::string& text) {
  static std::mutex mutex;
  static std::set<std::string> given;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (!given.insert(key).second) return false;
  }
  // Unchecked: a warning's queries; where they fail, the warning is printed here.
  int running = 0, finalized = 0, rank = 0;
  MPI_Initialized(&running);
  MPI_Finalized(&finalized);
  if (running && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) return false;
  std::fprintf(stderr, "warning: %s\n", text.c_str());
  return true;
}

}  // namespace distop::optim
