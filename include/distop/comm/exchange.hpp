#pragma once
// Exchange: a batch of point-to-point messages posted together and completed together.

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "distop/core/tensor.hpp"

namespace distop::comm {

// Posts nonblocking receives and sends on one communicator and completes them in wait(). Buffers
// live in distop's memory space; where that is device memory and MPI cannot read it, messages are
// staged through host buffers (copied in at send(), out at wait()). Post receives before sends.
// The waits yield the processor when the node is oversubscribed (see yield_when_idle).
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
  struct Staged {
    T* device = nullptr;
    std::vector<T> host;
  };
  MPI_Comm comm_;
  int tag_;
  std::vector<MPI_Request> requests_;
  std::vector<Staged> staged_;  // device builds only
};

extern template class Exchange<float>;
extern template class Exchange<double>;

}  // namespace distop::comm
