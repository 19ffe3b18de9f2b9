// CUDA builds: each rank of a node takes one of the node's GPUs, round robin by node-local rank,
// before Kokkos, cuBLAS or NCCL touch a device.
#include <cuda_runtime.h>
#include <mpi.h>

#include "cuda_check.hpp"
#include "distop/core/mpi_check.hpp"

namespace distop::detail {

int select_cuda_device() {
  constexpr const char* kOp = "select_cuda_device";
  int count = 0;
  // Unchecked: a failure here means no usable GPU, and the host paths run.
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();  // no GPU: host paths only; clear the sticky error
    return -1;
  }
  MPI_Comm node = MPI_COMM_NULL;
  int world = 0, local = 0;
  DISTOP_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world), kOp);
  DISTOP_MPI_CHECK(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world, MPI_INFO_NULL, &node), kOp);
  DISTOP_MPI_CHECK(MPI_Comm_rank(node, &local), kOp);
  DISTOP_MPI_CHECK(MPI_Comm_free(&node), kOp);
  DISTOP_CUDA_CHECK(cudaSetDevice(local % count), kOp);
  return local % count;
}

}  // namespace distop::detail
