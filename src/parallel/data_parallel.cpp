#include "distop/parallel/data_parallel.hpp"

#include <algorithm>
#include <climits>
#include <functional>

#include "distop/comm/agree.hpp"
#include "distop/comm/mpi.hpp"
#include "distop/core/error.hpp"
#include "gradient_reducer.hpp"

namespace distop::parallel {

namespace {

constexpr const char* kOp = "DataParallel";

}  // namespace

template <class T>
DataParallel<T>::DataParallel(nn::Module<T>& module, const Replicas& replicas,
                              DataParallelOptions options)
    : module_(&module), replicas_(&replicas) {
  // Every replica must hold the same model: the same parameters and buffers, by name and global
  // shape, in the same order (the buckets and the broadcast pair them up by position).
  comm::Fingerprint fp;
  std::string mine;
  for (const auto& p : module.named_parameters()) {
    fp.add(std::hash<std::string>{}(p.name)).add_all(p.var.space().global_shape().extents());
    fp.add(static_cast<std::uint64_t>(p.reduction));
    mine += (mine.empty() ? "" : ", ") + p.name + " " + p.var.space().global_shape().str();
  }
  for (const auto& b : module.named_buffers()) {
    fp.add(std::hash<std::string>{}(b.name));
    if (!b.count) fp.add_all(b.tensor.space().global_shape().extents());
  }
  comm::agree_on_fingerprint(replicas.world(), kOp, fp.value(), std::string(),
                             "the replicas hold different models (parameters " + mine +
                                 " on one rank); every replica must build the same model");
  reducer_ = std::make_unique<GradientReducer<T>>(module, replicas, options);
  reducer_->broadcast_state();
}

template <class T>
DataParallel<T>::~DataParallel() = default;

template <class T>
T DataParallel<T>::seed_of(const TensorSpace& space) {
  // k: the replicas that this rank's loss spans (0 on a rank outside the loss's partition, whose
  // seed seeds nothing). Agreed at every backward (one all-reduce of two integers), so that a loss
  // that changed its span on some ranks only is the same Error on every rank, not a hang in the
  // reduction.
  const Partition& p = space.partition();
  const int k = p.active() ? replicas_->spanned(p) : 0;
  int range[2] = {k > 0 ? -k : INT_MIN, k};  // max(-k), max(k) over the ranks that hold a loss
  DISTOP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, range, 2, MPI_INT, MPI_MAX, replicas_->world()),
                   kOp);
  const int lo = -range[0], hi = range[1];
  DISTOP_CHECK(hi > 0, kOp, "no rank holds a component of the loss");
  DISTOP_CHECK(lo == hi && replicas_->count() % hi == 0, kOp,
               "the losses' partitions span between ", lo, " and ", hi, " of the ",
               replicas_->count(),
               " replicas; each loss must be one replica's, or shared by the same number of "
               "replicas (dividing the replica count)");
  loss_replicas_ = hi;
  return static_cast<T>(hi);
}

template <class T>
void DataParallel<T>::backward(Tape& tape, Var<T>& loss) {
  reducer_->backward(tape, loss, seed_of(loss.space()));
}

template <class T>
void DataParallel<T>::backward_no_sync(Tape& tape, Var<T>& loss) {
  reducer_->backward_no_sync(tape, loss, seed_of(loss.space()));
}

template <class T>
void DataParallel<T>::broadcast_state() {
  reducer_->broadcast_state();
}

template <class T>
std::vector<typename DataParallel<T>::BucketInfo> DataParallel<T>::buckets() const {
  std::vector<BucketInfo> out;
  for (auto& b : reducer_->buckets()) out.push_back({std::move(b.parameters), b.bytes});
  return out;
}

template <class T>
bool DataParallel<T>::buckets_rebuilt() const noexcept {
  return reducer_->rebuilt();
}

template <class T>
double DataParallel<T>::last_wait_seconds() const noexcept {
  return reducer_->last_wait_seconds();
}

template <class T>
std::size_t DataParallel<T>::last_overlapped_buckets() const noexcept {
  return reducer_->last_overlapped_buckets();
}

template <class T>
std::size_t DataParallel<T>::gradient_bytes() const {
  return reducer_->gradient_bytes();
}

template <class T>
std::size_t DataParallel<T>::peak_gradient_bytes() const noexcept {
  return reducer_->peak_gradient_bytes();
}

template class DataParallel<float>;
template class DataParallel<double>;

namespace detail {
template <class T>
GradientReducer<T>& reducer_of(DataParallel<T>& data_parallel) {
  return *data_parallel.reducer_;
}
template GradientReducer<float>& reducer_of(DataParallel<float>&);
template GradientReducer<double>& reducer_of(DataParallel<double>&);
}  // namespace detail

}  // namespace distop::parallel
