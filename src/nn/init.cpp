#include "distop/nn/init.hpp"

#include <vector>

#include "distop/core/random.hpp"

namespace distop::nn {

template <class T>
void uniform_init(DistTensor<T>& x, std::uint64_t seed, double bound) {
  const auto idx = x.space().global_indices();
  std::vector<T> v(idx.size());
  for (std::size_t i = 0; i < idx.size(); ++i)
    v[i] = static_cast<T>(bound *
                          (2.0 * random::uniform(seed, static_cast<std::uint64_t>(idx[i])) - 1.0));
  x.local().copy_from(Tensor<T>::from_vector(x.space().local_shape(), v));
}

template <class T>
void normal_init(DistTensor<T>& x, std::uint64_t seed, double mean, double std) {
  const auto idx = x.space().global_indices();
  std::vector<T> v(idx.size());
  for (std::size_t i = 0; i < idx.size(); ++i)
    v[i] = static_cast<T>(mean + std * random::normal(seed, static_cast<std::uint64_t>(idx[i])));
  x.local().copy_from(Tensor<T>::from_vector(x.space().local_shape(), v));
}

std::uint64_t parameter_seed(std::uint64_t layer_seed, std::string_view parameter) {
  std::uint64_t h = random::mix(layer_seed);
  for (char c : parameter) h = random::mix(h ^ static_cast<unsigned char>(c));
  return h;
}

template void uniform_init(DistTensor<float>&, std::uint64_t, double);
template void uniform_init(DistTensor<double>&, std::uint64_t, double);
template void normal_init(DistTensor<float>&, std::uint64_t, double, double);
template void normal_init(DistTensor<double>&, std::uint64_t, double, double);

}  // namespace distop::nn
