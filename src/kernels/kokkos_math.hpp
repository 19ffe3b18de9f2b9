#pragma once
// Internal: Kokkos' portable math functions (usable inside device kernels) under one name. Kokkos
// 3.4 has them in Kokkos::Experimental; from 3.7 on they are in Kokkos.

#include <Kokkos_Core.hpp>

namespace distop::kernels::kmath {
#if KOKKOS_VERSION >= 30700
using Kokkos::erf;
using Kokkos::exp;
using Kokkos::log;
using Kokkos::log1p;
using Kokkos::sqrt;
using Kokkos::tanh;
#else
using Kokkos::Experimental::erf;
using Kokkos::Experimental::exp;
using Kokkos::Experimental::log;
using Kokkos::Experimental::log1p;
using Kokkos::Experimental::sqrt;
using Kokkos::Experimental::tanh;
#endif
}  // namespace distop::kernels::kmath
