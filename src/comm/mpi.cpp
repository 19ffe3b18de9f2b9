#include "distop/comm/mpi.hpp"

namespace distop::comm {

Comm Comm::duplicate(MPI_Comm comm) {
  Comm c;
  if (comm == MPI_COMM_NULL) return c;
  DISTOP_MPI_CHECK(MPI_Comm_dup(comm, &c.comm_), "Comm::duplicate");
  DISTOP_MPI_CHECK(MPI_Comm_set_errhandler(c.comm_, MPI_ERRORS_RETURN), "Comm::duplicate");
  return c;
}

Comm Comm::adopt(MPI_Comm comm) {
  Comm c;
  c.comm_ = comm;
  if (comm != MPI_COMM_NULL)
    DISTOP_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "Comm::adopt");
  return c;
}

Comm::~Comm() {
  // Unchecked: a destructor never throws; a communicator that fails to free is leaked.
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}

Comm& Comm::operator=(Comm&& other) noexcept {
  if (this != &other) {
    Comm dying(std::move(*this));
    comm_ = other.comm_;
    other.comm_ = MPI_COMM_NULL;
  }
  return *this;
}

int Comm::rank() const {
  int r = -1;
  if (!null()) DISTOP_MPI_CHECK(MPI_Comm_rank(comm_, &r), "Comm::rank");
  return r;
}

int Comm::size() const {
  int s = 0;
  if (!null()) DISTOP_MPI_CHECK(MPI_Comm_size(comm_, &s), "Comm::size");
  return s;
}

}  // namespace distop::comm
