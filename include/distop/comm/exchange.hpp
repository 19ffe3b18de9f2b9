#pragma once
// Exchange: a batch of point-to-point messages posted together and completed together.

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "distop/comm/backend.hpp"
#include "distop/core/tensor.hpp"

namespace distop::comm {

// Posts nonblocking receives and sends on one communicator and completes them in wait(). Each
// message goes to the backend of the memory its buffer lives in (comm/backend.hpp): MPI
// (MPI_Irecv/MPI_Isend, posted at once; the waits yield the processor when the node is
// oversubscribed, see yield_when_idle), staging (reused host buffers: copied in at send(), out at
// wait()), CUDA-aware MPI, or NCCL (device buffers: the batch is posted at wait() as one group of
// ncclSend/ncclRecv on the NCCL stream, after the producer stream's work, and the producer stream
// waits on its completion: the data never leaves the device and the host does not wait). Post
// receives before sends. Messages between two ranks match in the order they are posted.
template <class T>
class Exchange {
 public:
  explicit Exchange(MPI_Comm comm, int tag) : comm_(comm), tag_(tag) {}
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;
  // Completes what is still pending (errors ignored: destructors never throw).
  ~Exchange();

  void recv(T* buffer, std::int64_t count, int source);
  void send(const T* buffer, std::int64_t count, int dest);
  // Completes every message; received data is in place afterwards.
  void wait();

 private:
  // A message staged through a host buffer (the staging backend's lease, type-erased).
  struct Staged {
    T* target = nullptr;  // a receive's destination; null for a send
    std::int64_t count = 0;
    Memory memory = Memory::kHost;
    std::shared_ptr<void> buffer;
  };
  // A message for NCCL, posted at wait().
  struct DeviceMessage {
    void* buffer = nullptr;
    std::int64_t count = 0;
    int peer = 0;
    bool send = false;
  };
  void post(T* buffer, std::int64_t count, int peer, bool send);
  MPI_Comm comm_;
  int tag_;
  std::vector<MPI_Request> requests_;
  std::vector<Staged> staged_;
  std::vector<DeviceMessage> device_;
  bool producer_synchronized_ = false;  // CUDA-aware MPI: the producer stream waited for once
};

extern template class Exchange<float>;
extern template class Exchange<double>;

}  // namespace distop::comm
