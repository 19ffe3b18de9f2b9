// distop::watchdog: the hang watchdog's MPI profiling interface (comm/watchdog.hpp). A program
// that links this library gets these MPI_ definitions before the MPI library's, so that every
// blocking MPI call it makes, distop's and its own, is watched (comm::detail::WatchedMpiCall in
// libdistop), then made through its PMPI_ name, whose status goes back to the caller to check.
// libdistop itself defines no MPI_ function, so that a program without this library can use a
// profiler that interposes MPI (Score-P, mpiP).
#include <mpi.h>

#include "watchdog_call.hpp"

using distop::comm::detail::WatchedMpiCall;

namespace {
// Tells libdistop, when the program starts, that its blocking MPI calls are watched.
[[maybe_unused]] const bool g_noted = (distop::comm::detail::note_mpi_interposition(), true);
}  // namespace

extern "C" {

int MPI_Wait(MPI_Request* request, MPI_Status* status) {
  WatchedMpiCall c("MPI_Wait", MPI_COMM_NULL);
  return PMPI_Wait(request, status);
}
int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]) {
  WatchedMpiCall c("MPI_Waitall", MPI_COMM_NULL);
  return PMPI_Waitall(count, requests, statuses);
}
int MPI_Waitany(int count, MPI_Request requests[], int* index, MPI_Status* status) {
  WatchedMpiCall c("MPI_Waitany", MPI_COMM_NULL);
  return PMPI_Waitany(count, requests, index, status);
}
int MPI_Waitsome(int incount, MPI_Request requests[], int* outcount, int indices[],
                 MPI_Status statuses[]) {
  WatchedMpiCall c("MPI_Waitsome", MPI_COMM_NULL);
  return PMPI_Waitsome(incount, requests, outcount, indices, statuses);
}
int MPI_Recv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
             MPI_Status* status) {
  WatchedMpiCall c("MPI_Recv", comm);
  return PMPI_Recv(buf, count, type, source, tag, comm, status);
}
int MPI_Send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  WatchedMpiCall c("MPI_Send", comm);
  return PMPI_Send(buf, count, type, dest, tag, comm);
}
int MPI_Ssend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  WatchedMpiCall c("MPI_Ssend", comm);
  return PMPI_Ssend(buf, count, type, dest, tag, comm);
}
int MPI_Sendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag,
                 void* recvbuf, int recvcount, MPI_Datatype recvtype, int source, int recvtag,
                 MPI_Comm comm, MPI_Status* status) {
  WatchedMpiCall c("MPI_Sendrecv", comm);
  return PMPI_Sendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype,
                       source, recvtag, comm, status);
}
int MPI_Probe(int source, int tag, MPI_Comm comm, MPI_Status* status) {
  WatchedMpiCall c("MPI_Probe", comm);
  return PMPI_Probe(source, tag, comm, status);
}
int MPI_Barrier(MPI_Comm comm) {
  WatchedMpiCall c("MPI_Barrier", comm);
  return PMPI_Barrier(comm);
}
int MPI_Bcast(void* buf, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  WatchedMpiCall c("MPI_Bcast", comm);
  return PMPI_Bcast(buf, count, type, root, comm);
}
int MPI_Reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
               int root, MPI_Comm comm) {
  WatchedMpiCall c("MPI_Reduce", comm);
  return PMPI_Reduce(sendbuf, recvbuf, count, type, op, root, comm);
}
int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
                  MPI_Comm comm) {
  WatchedMpiCall c("MPI_Allreduce", comm);
  return PMPI_Allreduce(sendbuf, recvbuf, count, type, op, comm);
}
int MPI_Gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
               int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  WatchedMpiCall c("MPI_Gather", comm);
  return PMPI_Gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
}
int MPI_Gatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root,
                MPI_Comm comm) {
  WatchedMpiCall c("MPI_Gatherv", comm);
  return PMPI_Gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root,
                      comm);
}
int MPI_Scatter(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  WatchedMpiCall c("MPI_Scatter", comm);
  return PMPI_Scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
}
int MPI_Scatterv(const void* sendbuf, const int sendcounts[], const int displs[],
                 MPI_Datatype sendtype, void* recvbuf, int recvcount, MPI_Datatype recvtype,
                 int root, MPI_Comm comm) {
  WatchedMpiCall c("MPI_Scatterv", comm);
  return PMPI_Scatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root,
                       comm);
}
int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  WatchedMpiCall c("MPI_Allgather", comm);
  return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}
int MPI_Allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                   const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                   MPI_Comm comm) {
  WatchedMpiCall c("MPI_Allgatherv", comm);
  return PMPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
}
int MPI_Alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                 int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  WatchedMpiCall c("MPI_Alltoall", comm);
  return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}
int MPI_Alltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[],
                  MPI_Datatype sendtype, void* recvbuf, const int recvcounts[], const int rdispls[],
                  MPI_Datatype recvtype, MPI_Comm comm) {
  WatchedMpiCall c("MPI_Alltoallv", comm);
  return PMPI_Alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls,
                        recvtype, comm);
}
int MPI_Reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype type,
                             MPI_Op op, MPI_Comm comm) {
  WatchedMpiCall c("MPI_Reduce_scatter_block", comm);
  return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, type, op, comm);
}
int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* newcomm) {
  WatchedMpiCall c("MPI_Comm_split", comm);
  return PMPI_Comm_split(comm, color, key, newcomm);
}
int MPI_Comm_dup(MPI_Comm comm, MPI_Comm* newcomm) {
  WatchedMpiCall c("MPI_Comm_dup", comm);
  return PMPI_Comm_dup(comm, newcomm);
}

}  // extern "C"

// distop::watchdog's link option (-Wl,--undefined=distop_watchdog_interposition) names this
// symbol: the linker then takes this object out of the archive whether or not the program calls
// an MPI function itself.
extern "C" const int distop_watchdog_interposition = 1;
