#pragma once
// The linear probe of self-supervised learning: multinomial logistic regression on the frozen
// encoder's features of the training set, scored on the test set.

#include <cstdint>
#include <distop/distop.hpp>

#include "model.hpp"

namespace distop::examples {

struct ProbeOptions {
  std::int64_t train_examples = 0;  // the first this many training images (0: all of them)
  int epochs = 10;                  // passes of minibatch Adam over them
  std::int64_t batch_size = 256;    // global minibatch
  double lr = 1e-3;                 // Adam's learning rate
  double weight_decay = 1e-5;  // L2 penalty (weight_decay / 2) |W|^2 on the weights, not the bias
  // What the probe reads: the encoder's flattened maps (128 channels x 3 x 3 = 1152 features), or
  // each channel averaged over its 3 x 3 positions (128 features), the global average pool that
  // ends SimCLR's ResNet encoder.
  enum class Features { flat, pooled };
  Features features = Features::flat;
};

struct ProbeResult {
  std::int64_t train_examples = 0, test_examples = 0;
  double train_loss = 0;  // the mean cross-entropy on the training features after the last step
  double train_accuracy = 0, test_accuracy = 0;
  double feature_seconds = 0, fit_seconds = 0;
};

// The probe: replica `replica` of R (the model on one rank) computes the encoder's features
// (SimCLRNet::features, in evaluation mode, no gradient kept) of training images replica,
// replica + R, ... below train_examples, and of its contiguous share of the test images. The
// features are standardised with the training features' mean and standard deviation (per feature,
// over all the training examples). W [10, F] and b [10] start at zero and take `epochs` passes of
// minibatch Adam (torch.optim.Adam's definition, betas 0.9, 0.999) over the training examples in
// file order, minibatch k being examples [k batch_size, (k + 1) batch_size), on its mean
// cross-entropy plus (weight_decay / 2) |W|^2; each replica computes its examples' part of the
// gradient and MPI_Allreduce over `world` sums them. The minibatches are thus the same whatever
// R, and the result depends on R only through the order of floating-point sums. Then the training
// and test accuracies. Collective over `world` (whose ranks are the R replicas).
ProbeResult linear_probe(SimCLRNet& model, const data::Dataset& train, const data::Dataset& test,
                         const ProbeOptions& options, int replicas, int replica, MPI_Comm world);

}  // namespace distop::examples
