#pragma once
// Elementwise activations and their derivatives, and the row-broadcast helpers of a bias.

#include "distop/core/tensor.hpp"

namespace distop::kernels {

// Forward: y = f(x), overwriting y. Backward: dx = dy * f'(.), overwriting dx, from the saved
// input x (relu) or the saved output y (sigmoid, tanh). Element counts must match; an output may
// alias an input of the same call.
template <class T>
void relu(const Tensor<T>& x, Tensor<T>& y);
// dx = dy where x > 0, else 0.
template <class T>
void relu_backward(const Tensor<T>& x, const Tensor<T>& dy, Tensor<T>& dx);
template <class T>
void sigmoid(const Tensor<T>& x, Tensor<T>& y);
// dx = dy y (1 - y).
template <class T>
void sigmoid_backward(const Tensor<T>& y, const Tensor<T>& dy, Tensor<T>& dx);
template <class T>
void tanh(const Tensor<T>& x, Tensor<T>& y);
// dx = dy (1 - y^2).
template <class T>
void tanh_backward(const Tensor<T>& y, const Tensor<T>& dy, Tensor<T>& dx);

// y[i, j] += b[j] for y of shape [rows, n] and b of shape [n].
template <class T>
void add_row_vector(Tensor<T>& y, const Tensor<T>& b);
// y[i, j] = b[j] for y of shape [rows, n] and b of shape [n] (y is only written).
template <class T>
void fill_rows(Tensor<T>& y, const Tensor<T>& b);
// db[j] = sum_i dy[i, j] + beta db[j] for dy of shape [rows, n] and db of shape [n]; the sums are
// accumulated in double. When beta is 0, db is not read (it may be uninitialised).
template <class T>
void sum_rows(const Tensor<T>& dy, T beta, Tensor<T>& db);

}  // namespace distop::kernels
