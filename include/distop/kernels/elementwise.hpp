#pragma once
// Elementwise kernels of local tensors: functions of one tensor (activations and math) with their
// derivatives, arithmetic of two tensors with torch's broadcasting and its adjoint, and the bias
// rows. The kernels behind nn/activation.hpp, nn/pointwise.hpp, nn/arithmetic.hpp and the layers'
// biases.
//
// Forward kernels overwrite their output, which may alias an input of the same shape. Every
// backward kernel follows make_function's accumulate convention (autodiff/function.hpp): it takes
// `beta` and overwrites dx with beta dx + the contribution; with beta 0, dx is uninitialised and
// is not read. dx may alias dy. Sums are accumulated in double.

#include "distop/core/tensor.hpp"

namespace distop::kernels {

// ---- Functions of one tensor --------------------------------------------------------------------
// Forward: y = f(x) (the element counts match). Backward: dx = beta dx + dy f'(.), from the saved
// input x or the saved output y, as each names.

// y = max(x, 0) (a NaN passes on); from x: dy where x > 0, else 0.
template <class T>
void relu(const Tensor<T>& x, Tensor<T>& y);
template <class T>
void relu_backward(const Tensor<T>& x, const Tensor<T>& dy, T beta, Tensor<T>& dx);
// y = 1 / (1 + exp(-x)), overflowing nowhere; from y: dy y (1 - y).
template <class T>
void sigmoid(const Tensor<T>& x, Tensor<T>& y);
template <class T>
void sigmoid_backward(const Tensor<T>& y, const Tensor<T>& dy, T beta, Tensor<T>& dx);
// y = tanh(x); from y: dy (1 - y^2).
template <class T>
void tanh(const Tensor<T>& x, Tensor<T>& y);
template <class T>
void tanh_backward(const Tensor<T>& y, const Tensor<T>& dy, T beta, Tensor<T>& dx);
// y = exp(x); from y: dy y.
template <class T>
void exp(const Tensor<T>& x, Tensor<T>& y);
template <class T>
void exp_backward(const Tensor<T>& y, const Tensor<T>& dy, T beta, Tensor<T>& dx);
// y = log(x); from x: dy / x.
template <class T>
void log(const Tensor<T>& x, Tensor<T>& y);
template <class T>
void log_backward(const Tensor<T>& x, const Tensor<T>& dy, T beta, Tensor<T>& dx);
// y = sqrt(x); from y: dy / (2 y).
template <class T>
void sqrt(const Tensor<T>& x, Tensor<T>& y);
template <class T>
void sqrt_backward(const Tensor<T>& y, const Tensor<T>& dy, T beta, Tensor<T>& dx);
// y = 1 / sqrt(x); from y: -dy y^3 / 2.
template <class T>
void rsqrt(const Tensor<T>& x, Tensor<T>& y);
template <class T>
void rsqrt_backward(const Tensor<T>& y, const Tensor<T>& dy, T beta, Tensor<T>& dx);
// y = min(max(x, lo), hi) as torch.clamp: hi where lo > hi, a NaN stays NaN (infinite bounds for a
// missing one). From x: dy where lo <= x <= hi, else 0.
template <class T>
void clamp(const Tensor<T>& x, T lo, T hi, Tensor<T>& y);
template <class T>
void clamp_backward(const Tensor<T>& x, T lo, T hi, const Tensor<T>& dy, T beta, Tensor<T>& dx);
// y = log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)), which overflows nowhere. From x:
// dy sigmoid(-x).
template <class T>
void logsigmoid(const Tensor<T>& x, Tensor<T>& y);
template <class T>
void logsigmoid_backward(const Tensor<T>& x, const Tensor<T>& dy, T beta, Tensor<T>& dx);

// y = x Phi(x) = x (1 + erf(x / sqrt(2))) / 2, Phi the standard normal CDF (torch's gelu,
// approximate='none'); from x: dy (Phi(x) + x phi(x)), phi the standard normal density.
template <class T>
void gelu(const Tensor<T>& x, Tensor<T>& y);
template <class T>
void gelu_backward(const Tensor<T>& x, const Tensor<T>& dy, T beta, Tensor<T>& dx);
// y = x (1 + tanh(u)) / 2 with u = sqrt(2 / pi) (x + 0.044715 x^3) (torch's gelu,
// approximate='tanh'); from x: dy ((1 + tanh u) / 2 + x (1 - tanh^2 u) u'(x) / 2).
template <class T>
void gelu_tanh(const Tensor<T>& x, Tensor<T>& y);
template <class T>
void gelu_tanh_backward(const Tensor<T>& x, const Tensor<T>& dy, T beta, Tensor<T>& dx);
// y = x sigmoid(x) (SiLU, swish); from x: dy s (1 + x (1 - s)) with s = sigmoid(x).
template <class T>
void silu(const Tensor<T>& x, Tensor<T>& y);
template <class T>
void silu_backward(const Tensor<T>& x, const Tensor<T>& dy, T beta, Tensor<T>& dx);

// ---- Arithmetic with broadcasting ---------------------------------------------------------------
// The second operand b broadcasts against a by torch's rules on shapes: b's axes are aligned with
// a's trailing ones, each of b's extents equals a's or is 1, and b may have fewer axes (the
// missing leading ones count as 1). Any other pair of shapes is an Error. The output has a's shape
// and may alias a (and b where b has a's shape).

// c = a + alpha b.
template <class T>
void add(const Tensor<T>& a, T alpha, const Tensor<T>& b, Tensor<T>& c);
// c = alpha a b + beta c.
template <class T>
void mul(T alpha, const Tensor<T>& a, const Tensor<T>& b, T beta, Tensor<T>& c);
// c = alpha a / b + beta c.
template <class T>
void div(T alpha, const Tensor<T>& a, const Tensor<T>& b, T beta, Tensor<T>& c);
// y = x + s, for tensors of one element count.
template <class T>
void add_scalar(const Tensor<T>& x, T s, Tensor<T>& y);
// y = alpha x + beta y, for tensors of one element count (unlike axpby, which reads y, this one
// may write fresh, uninitialised storage).
template <class T>
void scaled_add(T alpha, const Tensor<T>& x, T beta, Tensor<T>& y);
// db = beta db + alpha (the sum of dy, times `weight` entry by entry where given, over the axes
// along which db's shape broadcasts against dy's): the adjoint of broadcasting db to dy's shape,
// with db's shape broadcasting against dy's as b's against a's above. `weight` has dy's shape.
template <class T>
void sum_to(const Tensor<T>& dy, T alpha, T beta, Tensor<T>& db, const Tensor<T>* weight = nullptr);

// ---- Bias rows ----------------------------------------------------------------------------------
// y of shape [rows, n] and b of shape [n] (an Error otherwise).

// y[i, j] += b[j].
template <class T>
void add_row_vector(Tensor<T>& y, const Tensor<T>& b);
// y[i, j] = b[j] (y is only written).
template <class T>
void fill_rows(Tensor<T>& y, const Tensor<T>& b);
// db[j] = beta db[j] + sum_i dy[i, j].
template <class T>
void sum_rows(const Tensor<T>& dy, T beta, Tensor<T>& db);

}  // namespace distop::kernels
