// distop's C++ layers behind torch's autograd: a layer (an nn::Module, or a plan such as
// SequenceParallelAttention) records its forward pass on a tape of its own, kept by the call until
// torch runs its backward, which replays that tape. The parameters are the module's own storage,
// handed to Python as arrays over the same memory (torch Parameters without a copy), so an
// optimizer's in-place step is what the next forward reads.
//
// The copies of a parameter: where a parameter is replicated over grid axes of its partition on
// which each copy receives only its own rank's part of the gradient (the sum convention of the
// local layers, LayerNorm, GroupNorm), the backward sums the copies' gradients over those axes
// (one all-reduce per parameter), so that every copy holds the gradient of the whole loss and any
// torch optimizer keeps the copies equal. Axes along which the layer already ties the copies (the
// tensor-parallel and sequence axes of the tensor-parallel layers) are left alone.

#include "layers.hpp"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"
#include "distop/autodiff/apply.hpp"
#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/loss/bce.hpp"
#include "distop/loss/dice.hpp"
#include "distop/loss/kl_div.hpp"
#include "distop/loss/l1.hpp"
#include "distop/loss/mse.hpp"
#include "distop/loss/poisson_nll.hpp"
#include "distop/loss/reduction.hpp"
#include "distop/nn/activation.hpp"
#include "distop/nn/distributed_conv.hpp"
#include "distop/nn/distributed_conv_transpose.hpp"
#include "distop/nn/embedding.hpp"
#include "distop/nn/group_norm.hpp"
#include "distop/nn/interpolate.hpp"
#include "distop/nn/layer_norm.hpp"
#include "distop/nn/module.hpp"
#include "distop/nn/sequence_parallel.hpp"
#include "distop/nn/tensor_parallel.hpp"
#include "distop/ops/all_sum_reduce.hpp"

namespace distop::python {
namespace {

using namespace nb::literals;

// What a forward call asks beyond its inputs.
struct CallOptions {
  bool is_causal = false;
};

template <class T>
using LayerForward = std::function<Var<T>(Tape&, const std::vector<Var<T>>&, const CallOptions&)>;

template <class T>
struct TypedLayer {
  std::shared_ptr<nn::Module<T>> module;  // null for a plan without parameters or modes
  std::shared_ptr<const void> plan;       // what `forward` uses besides the module, kept alive
  LayerForward<T> forward;
  std::vector<nn::NamedParameter<T>> parameters;
  // Per parameter: the sum of its copies over the axes where each holds its own part, or null.
  std::vector<std::shared_ptr<const AllSumReduce<T>>> copies;
};

struct Layer {
  DType dtype = DType::f32;
  std::string name;
  int inputs = 1;
  TypedLayer<float> f;
  TypedLayer<double> d;

  template <class T>
  TypedLayer<T>& get() {
    if constexpr (std::is_same_v<T, float>)
      return f;
    else
      return d;
  }
  template <class R>
  R visit(auto&& fn) {
    return dtype == DType::f32 ? fn.template operator()<float>() : fn.template operator()<double>();
  }
};

// The layer for one scalar type; `tied` lists the grid axes along which the module ties its
// parameters' copies itself. Collective over the parameters' partitions' parent (the copies'
// all-reduces are planned here).
template <class T>
std::shared_ptr<Layer> make_layer(std::string name, int inputs,
                                  std::shared_ptr<nn::Module<T>> module, LayerForward<T> forward,
                                  const std::set<int>& tied = {},
                                  std::shared_ptr<const void> plan = nullptr) {
  auto layer = std::make_shared<Layer>();
  layer->dtype = std::is_same_v<T, float> ? DType::f32 : DType::f64;
  layer->name = std::move(name);
  layer->inputs = inputs;
  auto& t = layer->template get<T>();
  t.module = std::move(module);
  t.plan = std::move(plan);
  t.forward = std::move(forward);
  if (t.module) t.parameters = t.module->named_parameters();
  for (const auto& p : t.parameters) {
    std::vector<int> axes;
    const auto& space = p.var.space();
    if (p.reduction == nn::GradientReduction::per_replica)
      for (int a = 0; a < space.partition().dim(); ++a)
        if (space.partition().shape()[a] > 1 && space.decomposition().replicates(a) &&
            tied.count(a) == 0)
          axes.push_back(a);
    t.copies.push_back(axes.empty() ? nullptr : std::make_shared<AllSumReduce<T>>(space, axes));
  }
  return layer;
}

// One forward call: its tape, its inputs and output, kept until backward.
struct Call {
  std::shared_ptr<Layer> layer;
  CallOptions options;
  Tape tape;
  std::vector<Var<float>> in_f;
  std::vector<Var<double>> in_d;
  Var<float> out_f;
  Var<double> out_d;
  bool replayed = false;

  template <class T>
  std::pair<std::vector<Var<T>>&, Var<T>&> vars() {
    if constexpr (std::is_same_v<T, float>)
      return {in_f, out_f};
    else
      return {in_d, out_d};
  }
};

std::pair<std::shared_ptr<Call>, nb::object> layer_forward(const std::shared_ptr<Layer>& layer,
                                                           const std::vector<TensorSpace>& spaces,
                                                           const std::vector<Array>& inputs,
                                                           const std::vector<bool>& requires_grad,
                                                           bool is_causal) {
  DISTOP_CHECK(static_cast<int>(inputs.size()) == layer->inputs && spaces.size() == inputs.size() &&
                   requires_grad.size() == inputs.size(),
               layer->name, "takes ", layer->inputs, " input(s), given ", inputs.size());
  for (const auto& a : inputs)
    DISTOP_CHECK(dtype_of(a, layer->name) == layer->dtype, layer->name,
                 "an input has another dtype than the layer's parameters");
  auto call = std::make_shared<Call>();
  call->layer = layer;
  call->options.is_causal = is_causal;
  auto out = layer->visit<nb::object>([&]<class T>() {
    auto [in, y] = call->template vars<T>();
    // Over the callers' memory, no copy: torch keeps the tensors (saved for backward) unchanged.
    for (std::size_t i = 0; i < inputs.size(); ++i)
      in.push_back(Var<T>(dist<T>(spaces[i], inputs[i], true), requires_grad[i]));
    y = layer->template get<T>().forward(call->tape, in, call->options);
    return to_array(y.value().local(), false);
  });
  return {call, out};
}

// (the inputs' gradients, None where an input needs none; the parameters' gradients).
nb::tuple layer_backward(Call& call, const Array& dy) {
  Layer& layer = *call.layer;
  DISTOP_CHECK(dtype_of(dy, layer.name) == layer.dtype, layer.name,
               "the output's gradient has another dtype than the output");
  return layer.visit<nb::tuple>([&]<class T>() {
    auto [in, y] = call.template vars<T>();
    auto& typed = layer.template get<T>();
    if (call.replayed) {
      // Again (retain_graph, gradcheck's second pass): the same forward on a new tape, collective
      // as the first, on every rank alike.
      call.tape.clear();
      for (auto& v : in) v = Var<T>(v.value(), v.requires_grad());
      y = typed.forward(call.tape, in, call.options);
    }
    call.replayed = true;
    for (auto& p : typed.parameters) p.var.zero_grad();
    DistTensor<T> seed = DistTensor<T>::from_local(y.space(), wrap<T>(dy).clone());
    distop::backward(call.tape, y, seed);
    nb::list inputs;
    for (auto& v : in) {
      if (!v.requires_grad())
        inputs.append(nb::none());
      else
        inputs.append(to_array(
            v.has_grad() ? v.grad().local() : Tensor<T>(v.value().local().shape()), false));
    }
    nb::list params;
    for (std::size_t i = 0; i < typed.parameters.size(); ++i) {
      const auto& v = typed.parameters[i].var;
      DistTensor<T> g = v.has_grad() ? v.take_grad() : DistTensor<T>(v.space());
      if (typed.copies[i]) g = typed.copies[i]->apply(g);
      params.append(to_array(g.local(), false));
    }
    return nb::make_tuple(inputs, params);
  });
}

// A layer of `dtype` built by make<T>() for T = float or double.
template <class Make>
std::shared_ptr<Layer> for_dtype(const std::string& dtype, Make&& make) {
  return dtype_from_name(dtype) == DType::f32 ? make.template operator()<float>()
                                              : make.template operator()<double>();
}

// A distributed convolution or transposed convolution over weight partition `p_w` (their
// constructors and partitions agree): (the layer, the input's partition, the output's).
template <template <class> class Conv, class Options>
std::tuple<std::shared_ptr<Layer>, Partition, Partition> conv_like(
    const char* name, const std::string& dtype, int dims, std::int64_t in, std::int64_t out,
    const std::vector<std::int64_t>& kernel, const Partition& p_w, const Options& options) {
  std::optional<std::pair<Partition, Partition>> parts;
  auto layer = for_dtype(dtype, [&]<class T>() {
    auto mod = std::make_shared<Conv<T>>(dims, in, out, nn::AxisValues(kernel), p_w, options);
    parts.emplace(mod->input_partition(), mod->output_partition());
    return make_layer<T>(name, 1, mod,
                         [mod](Tape& tape, const std::vector<Var<T>>& x, const CallOptions&) {
                           return mod->forward(tape, x[0]);
                         });
  });
  return {layer, parts->first, parts->second};
}

// A tensor-parallel self-attention layer (called on x with a causal flag), made of `args`; it ties
// its parameters' copies along the tensor axis and the sequence axis itself.
template <template <class> class Attention, class... Args>
std::shared_ptr<Layer> self_attention_layer(const char* name, const std::string& dtype,
                                            int tensor_axis, int sequence_axis,
                                            const Args&... args) {
  std::set<int> tied{tensor_axis};
  if (sequence_axis >= 0) tied.insert(sequence_axis);
  return for_dtype(dtype, [&]<class T>() {
    auto mod = std::make_shared<Attention<T>>(args...);
    return make_layer<T>(
        name, 1, mod,
        [mod](Tape& tape, const std::vector<Var<T>>& x, const CallOptions& c) {
          return mod->forward(tape, x[0], nn::AttentionMask<T>{.is_causal = c.is_causal});
        },
        tied);
  });
}

nn::SequenceLayout parse_layout(const std::string& name) {
  if (name == "contiguous") return nn::SequenceLayout::contiguous;
  if (name == "zigzag") return nn::SequenceLayout::zigzag;
  throw Error("sequence parallelism",
              "layout must be 'contiguous' or 'zigzag', not '" + name + "'");
}

nn::GeluApproximate parse_gelu(const std::string& name) {
  if (name == "none") return nn::GeluApproximate::none;
  if (name == "tanh") return nn::GeluApproximate::tanh;
  throw Error("GELU", "approximate must be 'none' or 'tanh', not '" + name + "'");
}

std::optional<nn::SequenceParallel> sequence_parallel(int axis, const std::string& strategy,
                                                      const std::string& layout) {
  if (axis < 0) return std::nullopt;
  return nn::SequenceParallel{axis, nn::parse_sequence_parallel_strategy(strategy),
                              parse_layout(layout)};
}

}  // namespace

void bind_layers(nb::module_& m) {
  nb::class_<Layer>(m, "Layer")
      .def_prop_ro("name", [](const Layer& l) { return l.name; })
      .def_prop_ro("dtype",
                   [](const Layer& l) { return l.dtype == DType::f32 ? "float32" : "float64"; })
      .def(
          "parameters",
          [](Layer& l) {
            return l.visit<nb::list>([&]<class T>() {
              nb::list out;
              for (const auto& p : l.template get<T>().parameters)
                out.append(nb::make_tuple(p.name, to_array(p.var.value().local(), false)));
              return out;
            });
          },
          "(name, array over the parameter's local storage) for each parameter, torch's names")
      .def(
          "train",
          [](Layer& l, bool on) {
            l.visit<int>([&]<class T>() {
              if (auto& mod = l.template get<T>().module) mod->train(on);
              return 0;
            });
          },
          "on"_a)
      .def(
          "state_dict",
          [](Layer& l) {
            return l.visit<nb::dict>([&]<class T>() {
              nb::dict out;
              auto& mod = l.template get<T>().module;
              if (!mod) return out;
              for (const auto& [name, entry] : mod->state_dict()) {
                if (entry.is_count()) {
                  const auto& v = std::get<std::vector<std::int64_t>>(entry.values);
                  out[name.c_str()] = nb::int_(v.empty() ? 0 : v[0]);
                  continue;
                }
                const auto& v = std::get<std::vector<T>>(entry.values);
                out[name.c_str()] = to_array(Tensor<T>::from_vector(entry.shape, v), false);
              }
              return out;
            });
          },
          "The module's state_dict as global tensors on every rank (torch's names and shapes). "
          "Collective over the parameters' partitions' parent.")
      .def("forward", &layer_forward, "spaces"_a, "inputs"_a, "requires_grad"_a,
           "is_causal"_a = false);

  nb::class_<Call>(m, "LayerCall").def("backward", &layer_backward, "dy"_a);

  m.def(
      "interpolate_layer",
      [](const std::string& dtype, const std::string& mode, const std::vector<std::int64_t>& size,
         const std::vector<double>& scale_factor, std::optional<bool> align_corners,
         bool recompute_scale_factor) {
        nn::InterpolateOptions o;
        if (!size.empty()) o.size = nn::AxisValues(size);
        if (!scale_factor.empty()) o.scale_factor = nn::AxisScales(scale_factor);
        o.mode = nn::parse_interpolate_mode(mode);
        o.align_corners = align_corners;
        o.recompute_scale_factor = recompute_scale_factor;
        return for_dtype(dtype, [&]<class T>() {
          auto mod = std::make_shared<nn::DistributedInterpolate<T>>(o);
          return make_layer<T>("DistributedUpsample", 1, mod,
                               [mod](Tape& tape, const std::vector<Var<T>>& x, const CallOptions&) {
                                 return mod->forward(tape, x[0]);
                               });
        });
      },
      "dtype"_a, "mode"_a, "size"_a, "scale_factor"_a, "align_corners"_a,
      "recompute_scale_factor"_a);

  m.def(
      "conv_layer",
      [](const std::string& dtype, int dims, std::int64_t in, std::int64_t out,
         const std::vector<std::int64_t>& kernel, const Partition& weight_partition,
         const std::vector<std::int64_t>& stride, const std::vector<std::int64_t>& padding,
         const std::vector<std::int64_t>& dilation, bool bias, std::uint64_t seed) {
        nn::ConvOptions o{.stride = nn::AxisValues(stride),
                          .padding = nn::AxisValues(padding),
                          .dilation = nn::AxisValues(dilation),
                          .bias = bias,
                          .seed = seed};
        return conv_like<nn::DistributedConv>("DistributedConv", dtype, dims, in, out, kernel,
                                              weight_partition, o);
      },
      "dtype"_a, "dims"_a, "in_channels"_a, "out_channels"_a, "kernel_size"_a, "weight_partition"_a,
      "stride"_a, "padding"_a, "dilation"_a, "bias"_a, "seed"_a);

  m.def(
      "conv_transpose_layer",
      [](const std::string& dtype, int dims, std::int64_t in, std::int64_t out,
         const std::vector<std::int64_t>& kernel, const Partition& weight_partition,
         const std::vector<std::int64_t>& stride, const std::vector<std::int64_t>& padding,
         const std::vector<std::int64_t>& output_padding, const std::vector<std::int64_t>& dilation,
         bool bias, std::uint64_t seed) {
        nn::ConvTransposeOptions o{.stride = nn::AxisValues(stride),
                                   .padding = nn::AxisValues(padding),
                                   .output_padding = nn::AxisValues(output_padding),
                                   .dilation = nn::AxisValues(dilation),
                                   .bias = bias,
                                   .seed = seed};
        return conv_like<nn::DistributedConvTranspose>("DistributedConvTranspose", dtype, dims, in,
                                                       out, kernel, weight_partition, o);
      },
      "dtype"_a, "dims"_a, "in_channels"_a, "out_channels"_a, "kernel_size"_a, "weight_partition"_a,
      "stride"_a, "padding"_a, "output_padding"_a, "dilation"_a, "bias"_a, "seed"_a);

  m.def(
      "group_norm_layer",
      [](const std::string& dtype, std::int64_t groups, std::int64_t channels,
         const Partition& partition, double eps, bool affine) {
        return for_dtype(dtype, [&]<class T>() {
          auto mod = std::make_shared<nn::GroupNorm<T>>(groups, channels, partition,
                                                        nn::GroupNormOptions{eps, affine});
          return make_layer<T>("DistributedGroupNorm", 1, mod,
                               [mod](Tape& tape, const std::vector<Var<T>>& x, const CallOptions&) {
                                 return mod->forward(tape, x[0]);
                               });
        });
      },
      "dtype"_a, "num_groups"_a, "num_channels"_a, "partition"_a, "eps"_a, "affine"_a);

  m.def(
      "layer_norm_layer",
      [](const std::string& dtype, std::int64_t dim, const Partition& partition, double eps,
         bool affine, bool bias, int split_axis) {
        return for_dtype(dtype, [&]<class T>() {
          nn::LayerNormOptions o{
              .eps = eps, .elementwise_affine = affine, .bias = bias, .split_axis = split_axis};
          auto mod = std::make_shared<nn::LayerNorm<T>>(dim, partition, o);
          return make_layer<T>("DistributedLayerNorm", 1, mod,
                               [mod](Tape& tape, const std::vector<Var<T>>& x, const CallOptions&) {
                                 return mod->forward(tape, x[0]);
                               });
        });
      },
      "dtype"_a, "dim"_a, "partition"_a, "eps"_a, "elementwise_affine"_a, "bias"_a, "split_axis"_a);

  m.def(
      "embedding_layer",
      [](const std::string& dtype, std::int64_t num_embeddings, std::int64_t embedding_dim,
         const Partition& partition, int vocab_axis, std::optional<std::int64_t> padding_idx,
         std::uint64_t seed) {
        nn::EmbeddingOptions o{
            .padding_idx = padding_idx, .seed = seed, .vocab_split_axis = vocab_axis};
        // The indices are the same on every rank of the partition, so every copy of the weight
        // (block) already receives the whole gradient: every axis is tied.
        std::set<int> tied;
        for (int a = 0; a < partition.dim(); ++a) tied.insert(a);
        return for_dtype(dtype, [&]<class T>() {
          auto mod =
              std::make_shared<nn::Embedding<T>>(num_embeddings, embedding_dim, partition, o);
          return make_layer<T>(
              "DistributedEmbedding", 1, mod,
              [mod](Tape& tape, const std::vector<Var<T>>& x, const CallOptions&) {
                return mod->forward(tape, x[0].value());
              },
              tied);
        });
      },
      "dtype"_a, "num_embeddings"_a, "embedding_dim"_a, "partition"_a, "vocab_axis"_a,
      "padding_idx"_a, "seed"_a);

  m.def(
      "multihead_attention_layer",
      [](const std::string& dtype, std::int64_t embed_dim, std::int64_t num_heads,
         const Partition& partition, int tensor_axis, double dropout, std::uint64_t seed,
         int sequence_axis, const std::string& strategy, const std::string& layout) {
        nn::TensorParallelMultiheadAttentionOptions o{
            .tensor_axis = tensor_axis,
            .dropout = dropout,
            .seed = seed,
            .sequence_parallel = sequence_parallel(sequence_axis, strategy, layout)};
        return self_attention_layer<nn::TensorParallelMultiheadAttention>(
            "DistributedMultiheadAttention", dtype, tensor_axis, sequence_axis, embed_dim,
            num_heads, partition, o);
      },
      "dtype"_a, "embed_dim"_a, "num_heads"_a, "partition"_a, "tensor_axis"_a, "dropout"_a,
      "seed"_a, "sequence_axis"_a, "strategy"_a, "layout"_a);

  m.def(
      "transformer_encoder_layer",
      [](const std::string& dtype, std::int64_t d_model, std::int64_t nhead,
         std::int64_t dim_feedforward, const Partition& partition, int tensor_axis, double dropout,
         double layer_norm_eps, const std::string& approximate, std::uint64_t seed,
         int sequence_axis, const std::string& strategy, const std::string& layout) {
        nn::TensorParallelTransformerEncoderLayerOptions o{
            .tensor_axis = tensor_axis,
            .dropout = dropout,
            .layer_norm_eps = layer_norm_eps,
            .approximate = parse_gelu(approximate),
            .seed = seed,
            .sequence_parallel = sequence_parallel(sequence_axis, strategy, layout)};
        return self_attention_layer<nn::TensorParallelTransformerEncoderLayer>(
            "DistributedTransformerEncoderLayer", dtype, tensor_axis, sequence_axis, d_model, nhead,
            dim_feedforward, partition, o);
      },
      "dtype"_a, "d_model"_a, "nhead"_a, "dim_feedforward"_a, "partition"_a, "tensor_axis"_a,
      "dropout"_a, "layer_norm_eps"_a, "approximate"_a, "seed"_a, "sequence_axis"_a, "strategy"_a,
      "layout"_a);

  m.def(
      "sequence_attention_layer",
      [](const std::string& dtype, const TensorSpace& heads, int sequence_axis,
         const std::string& strategy, const std::string& layout, double dropout,
         std::uint64_t dropout_seed, std::optional<double> scale) {
        const auto sp = *sequence_parallel(sequence_axis, strategy, layout);
        return for_dtype(dtype, [&]<class T>() {
          auto plan = std::make_shared<const nn::SequenceParallelAttention<T>>(heads, sp);
          nn::SequenceAttentionOptions o{
              .dropout = dropout, .dropout_seed = dropout_seed, .scale = scale};
          return make_layer<T>(
              "sequence_parallel_attention", 3, nullptr,
              [plan, o](Tape& tape, const std::vector<Var<T>>& qkv, const CallOptions& c) {
                auto options = o;
                options.is_causal = c.is_causal;
                return plan->forward(tape, qkv[0], qkv[1], qkv[2], options);
              },
              {}, plan);
        });
      },
      "dtype"_a, "space"_a, "sequence_axis"_a, "strategy"_a, "layout"_a, "dropout"_a,
      "dropout_seed"_a, "scale"_a);

  // The distributed losses: input (with a gradient) and target (without) in one space; the loss
  // in distop's convention (a [1] tensor on every rank of the input's partition whose components
  // add up to the loss), or the per-entry terms for reduction "none".
  m.def(
      "loss_layer",
      [](const std::string& dtype, const std::string& kind, const std::string& reduction,
         bool log_input, bool full, double eps, bool log_target, bool has_pos_weight,
         double smooth) {
        const auto r = loss::parse_reduction(reduction);
        const auto check = [&](bool ok, const char* what) {
          DISTOP_CHECK(ok, kind, "reduction '", reduction, "' ", what);
        };
        if (kind != "kl_div") check(r != loss::Reduction::batchmean, "is KLDiv's only");
        return for_dtype(dtype, [&]<class T>() -> std::shared_ptr<Layer> {
          using Inputs = std::vector<Var<T>>;
          LayerForward<T> f;
          int inputs = 2;
          if (kind == "l1") {
            f = [r](Tape& t, const Inputs& x, const CallOptions&) {
              return loss::l1(t, x[0], x[1].value(), {.reduction = r});
            };
          } else if (kind == "mse") {
            f = [r](Tape& t, const Inputs& x, const CallOptions&) {
              return loss::mse(t, x[0], x[1].value(), {.reduction = r});
            };
          } else if (kind == "poisson_nll") {
            loss::PoissonNLLOptions o{
                .log_input = log_input, .full = full, .eps = eps, .reduction = r};
            f = [o](Tape& t, const Inputs& x, const CallOptions&) {
              return loss::poisson_nll(t, x[0], x[1].value(), o);
            };
          } else if (kind == "bce") {
            f = [r](Tape& t, const Inputs& x, const CallOptions&) {
              return loss::bce(t, x[0], x[1].value(), {.reduction = r});
            };
          } else if (kind == "bce_with_logits") {
            inputs = has_pos_weight ? 3 : 2;
            f = [r](Tape& t, const Inputs& x, const CallOptions&) {
              loss::BCEWithLogitsOptions<T> o{.reduction = r};
              if (x.size() == 3) o.pos_weight = x[2].value().local();
              return loss::bce_with_logits(t, x[0], x[1].value(), o);
            };
          } else if (kind == "kl_div") {
            f = [r, log_target](Tape& t, const Inputs& x, const CallOptions&) {
              return loss::kl_div(t, x[0], x[1].value(),
                                  {.reduction = r, .log_target = log_target});
            };
          } else if (kind == "dice") {
            f = [smooth](Tape& t, const Inputs& x, const CallOptions&) {
              return loss::dice(t, x[0], x[1].value(), {.smooth = smooth});
            };
          } else {
            throw Error("distop.nn", "no loss named '" + kind + "'");
          }
          return make_layer<T>(kind, inputs, nullptr, std::move(f));
        });
      },
      "dtype"_a, "kind"_a, "reduction"_a, "log_input"_a, "full"_a, "eps"_a, "log_target"_a,
      "has_pos_weight"_a, "smooth"_a);

  m.def(
      "sequence_blocks",
      [](std::int64_t length, int parts, const std::string& layout) {
        return nn::sequence_blocks(length, parts, parse_layout(layout));
      },
      "length"_a, "parts"_a, "layout"_a);
  m.def(
      "sequence_positions",
      [](std::int64_t length, int parts, const std::string& layout) {
        return nn::sequence_positions(length, parts, parse_layout(layout));
      },
      "length"_a, "parts"_a, "layout"_a);
}

}  // namespace distop::python
