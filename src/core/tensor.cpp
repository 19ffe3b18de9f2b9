#include "distop/core/tensor.hpp"

#include "tensor_impl.hpp"

namespace distop {

template class Tensor<float, MemSpace>;
template class Tensor<double, MemSpace>;
#if DISTOP_DEVICE_MEMORY_SPACE
template class Tensor<float, HostMemSpace>;
template class Tensor<double, HostMemSpace>;
#endif

}  // namespace distop
