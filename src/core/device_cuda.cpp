// CUDA builds: each rank of a node takes one of the node's GPUs, round robin by node-local rank,
// before Kokkos, cuBLAS or NCCL touch a device.
#include <cuda_runtime.h>
#include <mpi.h>

namespace distop::detail {

int select_cuda_device() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();  // no GPU: host paths only; clear the sticky error
    return -1;
  }
  MPI_Comm node = MPI_COMM_NULL;
  int world = 0, local = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world);
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world, MPI_INFO_NULL, &node) ==
      MPI_SUCCESS) {
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
  }
  cudaSetDevice(local % count);
  return local % count;
}

}  // namespace distop::detail
