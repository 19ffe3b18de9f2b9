#pragma once
// The layers of distop._core (layers.cpp): distop's C++ layers behind torch's autograd.

#include <nanobind/nanobind.h>

namespace distop::python {

void bind_layers(nanobind::module_& m);

}  // namespace distop::python
