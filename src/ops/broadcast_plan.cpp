#include "distop/ops/broadcast_plan.hpp"

#include <algorithm>
#include <climits>

#include "distop/comm/agree.hpp"
#include "distop/comm/collectives.hpp"
#include "distop/core/error.hpp"

namespace distop {

namespace {
constexpr const char* kOp = "BroadcastPlan";

void check_counts(std::int64_t a, std::int64_t b, const char* what) {
  DISTOP_CHECK(a == b, kOp, what, ": the source box has ", a, " entries but the destination box ",
               b);
}
}  // namespace

BroadcastPlan::BroadcastPlan(Partition src, Partition dst)
    : src_(std::move(src)), dst_(std::move(dst)) {
  // The checks are agreed before the groups' communicators are created, so that no rank leaves
  // the others waiting in MPI_Comm_create_group.
  std::string problem;
  try {
    int same = MPI_UNEQUAL;
    DISTOP_MPI_CHECK(MPI_Comm_compare(src_.parent(), dst_.parent(), &same), kOp);
    DISTOP_CHECK(same == MPI_IDENT || same == MPI_CONGRUENT, kOp,
                 "the partitions come from different parent communicators");
    DISTOP_CHECK(src_.dim() <= dst_.dim(), kOp, "cannot broadcast from ", src_.str(), " to ",
                 dst_.str(), ": the source grid has more axes");
    pad_ = dst_.dim() - src_.dim();
    for (int a = 0; a < dst_.dim(); ++a) {
      const auto s = a < pad_ ? 1 : src_.shape()[a - pad_];
      DISTOP_CHECK(s == 1 || s == dst_.shape()[a], kOp, "cannot broadcast from ", src_.str(),
                   " to ", dst_.str(), ": grid axis ", a, " has extent ", s,
                   " in the (left-padded) source and ", dst_.shape()[a],
                   " in the destination; it must be equal or 1");
    }
  } catch (const Error& e) {
    problem = e.detail();
  }
  comm::Fingerprint fp;
  fp.add_all(src_.shape().extents()).add_all(src_.ranks());
  fp.add_all(dst_.shape().extents()).add_all(dst_.ranks());
  comm::agree_on_arguments(src_.parent(), kOp, fp.value(), problem,
                           "this rank asked to broadcast from " + src_.str() + " to " + dst_.str());
  // Members of each group, root first.
  std::vector<std::vector<int>> members(static_cast<std::size_t>(src_.size()));
  for (int g = 0; g < src_.size(); ++g) members[g].push_back(src_.ranks()[g]);
  for (int i = 0; i < dst_.size(); ++i) {
    const int g = source_group(dst_.coords_of(i));
    const int r = dst_.ranks()[i];
    if (members[g].front() != r) members[g].push_back(r);
  }
  const int me = src_.parent_rank();
  MPI_Group parent_group;
  DISTOP_MPI_CHECK(MPI_Comm_group(src_.parent(), &parent_group), kOp);
  for (int g = 0; g < src_.size(); ++g) {
    const auto& m = members[g];
    if (std::find(m.begin(), m.end(), me) == m.end()) continue;
    Group grp;
    grp.id = g;
    grp.root = m.front() == me;
    const auto my_dst = dst_.coords_of_rank(me);
    grp.member = !my_dst.empty() && source_group(my_dst) == g;
    grp.size = static_cast<int>(m.size());
    if (m.size() > 1) {
      MPI_Group group;
      DISTOP_MPI_CHECK(MPI_Group_incl(parent_group, static_cast<int>(m.size()), m.data(), &group),
                       kOp);
      MPI_Comm c = MPI_COMM_NULL;
      const int rc = MPI_Comm_create_group(src_.parent(), group, g, &c);
      const int freed = MPI_Group_free(&group);
      DISTOP_MPI_CHECK(rc, kOp);  // MPI_Comm_create_group's
      DISTOP_MPI_CHECK(freed, kOp);
      grp.comm = comm::Comm::adopt(c);
    }
    groups_.push_back(std::move(grp));
  }
  DISTOP_MPI_CHECK(MPI_Group_free(&parent_group), kOp);
}

int BroadcastPlan::source_group(const std::vector<int>& dst_coords) const {
  std::int64_t index = 0;
  for (int a = 0; a < src_.dim(); ++a)
    index = index * src_.shape()[a] + (src_.shape()[a] == 1 ? 0 : dst_coords[a + pad_]);
  return static_cast<int>(index);
}

std::shared_ptr<const BroadcastPlan> BroadcastPlan::agreed(const TensorSpace& src_space,
                                                           const Partition& dst, const char* op) {
  auto plan = std::make_shared<const BroadcastPlan>(src_space.partition(), dst);
  std::string problem;
  try {
    (void)plan->broadcast_space(src_space);
    const std::int64_t count = src_space.local_shape().numel();
    DISTOP_CHECK(count <= INT_MAX, op, "a box of ", count, " entries (", src_space.str(),
                 ") exceeds MPI's int count limit; split the tensor over more ranks");
  } catch (const Error& e) {
    problem = e.detail();
  }
  comm::agree_on_arguments(src_space.partition().parent(), op, src_space.fingerprint(), problem,
                           "this rank passed " + src_space.str());
  return plan;
}

TensorSpace BroadcastPlan::broadcast_space(const TensorSpace& src_space) const {
  DISTOP_CHECK(src_space.partition().same_as(src_), kOp, "a tensor of ", src_space.str(),
               " does not live on the plan's source ", src_.str());
  const auto& d = src_space.decomposition();
  std::vector<int> map;
  std::vector<std::vector<std::int64_t>> extents;
  for (int t = 0; t < src_space.rank(); ++t) {
    const int g = d.axis_map()[t];
    const auto& b = d.bounds(t);
    const bool split = g >= 0 && src_.shape()[g] > 1;
    map.push_back(split ? g + pad_ : -1);
    std::vector<std::int64_t> e;
    if (split) {
      for (std::size_t i = 0; i + 1 < b.size(); ++i) e.push_back(b[i + 1] - b[i]);
    } else {
      e.push_back(src_space.global_shape()[t]);
    }
    extents.push_back(std::move(e));
  }
  return TensorSpace(dst_,
                     Decomposition::blocks(src_space.global_shape(), dst_.shape(), extents, map));
}

template <class T>
void BroadcastPlan::broadcast(const T* x, std::int64_t x_count, T* y, std::int64_t y_count) const {
  for (const auto& g : groups_) {
    if (g.root && g.member) check_counts(x_count, y_count, "broadcast");
    T* own_copy = g.root && g.member ? y : nullptr;
    if (g.comm.null()) {
      comm::copy(x, own_copy, x_count);  // a group of one: the root is its only destination
    } else if (g.root) {
      // The root sends from x itself and writes its own copy while the message travels.
      comm::bcast_with_copy(x, own_copy, static_cast<T*>(nullptr), x_count, 0, g.comm.get());
    } else {
      comm::bcast_with_copy(static_cast<const T*>(nullptr), static_cast<T*>(nullptr), y, y_count, 0,
                            g.comm.get());
    }
  }
}

template <class T>
void BroadcastPlan::reduce(const T* y, std::int64_t y_count, T* x, std::int64_t x_count) const {
  for (const auto& g : groups_) {
    if (!g.root) {
      comm::reduce_sum(y, static_cast<T*>(nullptr), y_count, 0, g.comm.get());
    } else if (g.member) {
      check_counts(x_count, y_count, "reduce");
      if (g.comm.null()) {
        comm::copy(y, x, x_count);
      } else {
        comm::reduce_sum(y, x, x_count, 0, g.comm.get());
      }
    } else {
      // A root outside the destination contributes nothing: reduce in place onto zeros.
      comm::fill_zero(x, x_count);
      comm::reduce_sum(static_cast<const T*>(nullptr), x, x_count, 0, g.comm.get());
    }
  }
}

CommStats BroadcastPlan::broadcast_stats(std::int64_t x_count, std::int64_t y_count,
                                         std::size_t element) const {
  CommStats s;
  for (const auto& g : groups_) {
    if (g.root) {
      s.messages_sent += g.size - 1;
      s.bytes_sent += (g.size - 1) * x_count * static_cast<std::int64_t>(element);
    } else {
      s.messages_received += 1;
      s.bytes_received += y_count * static_cast<std::int64_t>(element);
    }
  }
  return s;
}

CommStats BroadcastPlan::reduce_stats(std::int64_t y_count, std::int64_t x_count,
                                      std::size_t element) const {
  const auto b = broadcast_stats(x_count, y_count, element);
  return {b.messages_received, b.bytes_received, b.messages_sent, b.bytes_sent};
}

template void BroadcastPlan::broadcast(const float*, std::int64_t, float*, std::int64_t) const;
template void BroadcastPlan::broadcast(const double*, std::int64_t, double*, std::int64_t) const;
template void BroadcastPlan::reduce(const float*, std::int64_t, float*, std::int64_t) const;
template void BroadcastPlan::reduce(const double*, std::int64_t, double*, std::int64_t) const;

}  // namespace distop
