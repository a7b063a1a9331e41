// The tensor-level checks of the libtorch adapter's worker (torch_worker.cc): autograd
// through the collectives, every dtype and layout, and the corner cases of the tensor
// operations. Each throws kolo_test::Failure with what went wrong.
#pragma once

#include <string>

#include <torch/torch.h>

namespace kolo_test {

// Gradients of allreduce, allgather and broadcast on `device`; `prefix` names the tensors.
void check_autograd_on(const torch::Device& device, const std::string& prefix);
void check_tensor_ops();
void check_tensor_op_corner_cases();
// Collectives, autograd, DistributedOptimizer and object broadcasts on a process set of
// every rank but 0 (2 ranks or more; process_set_checks.cc).
void check_process_sets();
// kolo::SyncBatchNorm and convert_sync_batchnorm against BatchNorm on the global batch
// (sync_batch_norm_checks.cc).
void check_sync_batch_norm();
// kolo::GradScaler with a DistributedOptimizer (grad_scaler_checks.cc).
void check_grad_scaler();

}  // namespace kolo_test
