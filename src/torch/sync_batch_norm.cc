// SyncBatchNorm and convert_sync_batchnorm (kolo/torch.h).
//
// Training-mode forward: each channel's local sum, sum of squares and element count are
// allreduced in float64 (one fused call), giving the global mean and biased variance that
// normalize, and the unbiased variance the running statistics take. The normalization is
// an autograd Function whose backward allreduces the channel sums of dy and of
// dy * (x - mean), and computes the input's gradient as one global batch norm's:
//   dx = (dy - mean(dy) - (x - mean) * invstd^2 * mean(dy * (x - mean))) * invstd * weight
// with the means over the global batch. The weight's and bias's gradients stay local.
#include <atomic>
#include <string>
#include <utility>
#include <vector>

#include "kolo/torch.h"

namespace kolo {

namespace {

// The channel statistics' shape for an input of `dim` dimensions: [1, C, 1, ...].
std::vector<std::int64_t> channel_shape(std::int64_t channels, std::int64_t dim) {
  std::vector<std::int64_t> shape(static_cast<std::size_t>(dim), 1);
  shape[1] = channels;
  return shape;
}

// Every dimension but the channels'.
std::vector<std::int64_t> reduce_dims(std::int64_t dim) {
  std::vector<std::int64_t> dims = {0};
  for (std::int64_t d = 2; d < dim; ++d) dims.push_back(d);
  return dims;
}

struct Saved {
  std::string name;
  int process_set = kGlobalProcessSet;
  double count = 0;  // elements per channel in the global batch
};

class SyncNormalize : public torch::autograd::Function<SyncNormalize> {
 public:
  // y = (x - mean) * invstd * weight + bias; mean and invstd (shape [C], float64) are the
  // global batch's, weight and bias may be undefined (no affine).
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               const torch::Tensor& mean, const torch::Tensor& invstd,
                               const std::string& name, std::int64_t process_set, double count) {
    const auto shape = channel_shape(x.size(1), x.dim());
    const torch::Tensor m = mean.to(x.scalar_type()).view(shape);
    const torch::Tensor s = invstd.to(x.scalar_type()).view(shape);
    torch::Tensor y = (x - m) * s;
    if (weight.defined()) y = y * weight.view(shape);
    if (bias.defined()) y = y + bias.view(shape);
    ctx->save_for_backward({x, weight, mean, invstd});
    ctx->saved_data["name"] = name;
    ctx->saved_data["process_set"] = process_set;
    ctx->saved_data["count"] = count;
    ctx->saved_data["has_bias"] = bias.defined();
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor& mean = saved[2];
    const torch::Tensor& invstd = saved[3];
    const std::string name = ctx->saved_data["name"].toStringRef();
    const int process_set = static_cast<int>(ctx->saved_data["process_set"].toInt());
    const double count = ctx->saved_data["count"].toDouble();
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    const torch::Tensor dy = grads[0].contiguous();
    const std::int64_t channels = x.size(1);
    const auto shape = channel_shape(channels, x.dim());
    const auto dims = reduce_dims(x.dim());

    const torch::Tensor xmu = x.to(torch::kDouble) - mean.view(shape);
    const torch::Tensor dyd = dy.to(torch::kDouble);
    const torch::Tensor sum_dy = dyd.sum(dims);
    const torch::Tensor sum_dy_xmu = (dyd * xmu).sum(dims);
    // This rank's parameter gradients (DistributedOptimizer averages them).
    torch::Tensor grad_weight, grad_bias;
    if (weight.defined()) grad_weight = (sum_dy_xmu * invstd).to(weight.scalar_type());
    if (has_bias) grad_bias = sum_dy.to(weight.defined() ? weight.scalar_type() : x.scalar_type());
    // Always (also when x needs no gradient): every rank takes part in the collective.
    torch::Tensor grad_x;
    {
      const torch::Tensor global =
          allreduce(torch::cat({sum_dy, sum_dy_xmu}).to(torch::kCPU),
                    {.name = name + ".backward", .op = ReduceOp::kSum, .process_set = process_set})
              .to(x.device());
      const torch::Tensor mean_dy = (global.slice(0, 0, channels) / count).view(shape);
      const torch::Tensor mean_dy_xmu = (global.slice(0, channels) / count).view(shape);
      const torch::Tensor s = invstd.view(shape);
      torch::Tensor scale = s;
      if (weight.defined()) scale = scale * weight.to(torch::kDouble).view(shape);
      grad_x = ((dyd - mean_dy - xmu * s * s * mean_dy_xmu) * scale).to(x.scalar_type());
    }
    return {grad_x,          grad_weight,     grad_bias,       torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

std::atomic<int> g_made{0};  // names the unnamed ones: "syncbn.<n>"

}  // namespace

SyncBatchNormImpl::SyncBatchNormImpl(SyncBatchNormOptions o) : options(std::move(o)) {
  if (options.num_features < 1) {
    throw Error(ErrorCode::kInvalidArgument,
                "SyncBatchNorm: num_features must be at least 1, not " +
                    std::to_string(options.num_features));
  }
  if (options.name.empty()) options.name = "syncbn." + std::to_string(g_made++);
  reset();
}

void SyncBatchNormImpl::reset() {
  const std::int64_t c = options.num_features;
  if (options.affine) {
    weight = register_parameter("weight", torch::ones({c}));
    bias = register_parameter("bias", torch::zeros({c}));
  }
  if (options.track_running_stats) {
    running_mean = register_buffer("running_mean", torch::zeros({c}));
    running_var = register_buffer("running_var", torch::ones({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", torch::zeros({}, torch::kLong));
  }
}

torch::Tensor SyncBatchNormImpl::forward(const torch::Tensor& input) {
  const std::int64_t c = options.num_features;
  if (input.dim() < 2 || input.dim() > 5 || input.size(1) != c) {
    std::string sizes;
    for (std::int64_t d = 0; d < input.dim(); ++d) {
      sizes += (d ? ", " : "") + std::to_string(input.size(d));
    }
    throw Error(ErrorCode::kInvalidArgument,
                "SyncBatchNorm '" + options.name + "' on rank " + std::to_string(kolo::rank()) +
                    ": expected an input of shape (N, " + std::to_string(c) +
                    ", ...) with 2 to 5 dimensions, got (" + sizes + ")");
  }
  if (!is_training() && options.track_running_stats) {
    return torch::batch_norm(input, weight, bias, running_mean, running_var, /*training=*/false,
                             options.momentum, options.eps, /*cudnn_enabled=*/true);
  }
  // The global batch's statistics: one allreduce of [sum (C), sum of squares (C), count].
  const auto dims = reduce_dims(input.dim());
  const torch::Tensor xd = input.detach().to(torch::kDouble);
  const double local_count = input.numel() == 0 ? 0.0 : static_cast<double>(input.numel() / c);
  const torch::Tensor stats =
      torch::cat({xd.sum(dims), (xd * xd).sum(dims), torch::full({1}, local_count, xd.options())})
          .to(torch::kCPU);
  const torch::Tensor global = allreduce(stats, {.name = options.name + ".forward",
                                                 .op = ReduceOp::kSum,
                                                 .process_set = options.process_set});
  const double count = global[2 * c].item<double>();
  if (count < 1) {
    throw Error(ErrorCode::kInvalidArgument,
                "SyncBatchNorm '" + options.name + "': the global batch is empty on every rank");
  }
  const torch::Tensor mean = (global.slice(0, 0, c) / count).to(input.device());
  const torch::Tensor var = (global.slice(0, c, 2 * c) / count).to(input.device()) - mean * mean;
  const torch::Tensor biased = var.clamp_min(0);
  const torch::Tensor invstd = (biased + options.eps).rsqrt();
  if (is_training() && options.track_running_stats) {
    torch::NoGradGuard no_grad;
    const double m = options.momentum;
    const torch::Tensor unbiased = count > 1 ? biased * (count / (count - 1)) : biased;
    running_mean.mul_(1 - m).add_(mean.to(running_mean.scalar_type()), m);
    running_var.mul_(1 - m).add_(unbiased.to(running_var.scalar_type()), m);
    num_batches_tracked.add_(1);
  }
  return SyncNormalize::apply(input, weight, bias, mean, invstd, options.name,
                              static_cast<std::int64_t>(options.process_set), count);
}

namespace {

// The BatchNorm options and state of a libtorch BatchNorm{1,2,3}d, if `module` is one.
template <typename Impl>
bool batch_norm_of(const std::shared_ptr<torch::nn::Module>& module, SyncBatchNormOptions* o,
                   std::shared_ptr<torch::nn::Module>* state) {
  auto bn = std::dynamic_pointer_cast<Impl>(module);
  if (!bn) return false;
  const auto& opt = bn->options;
  o->num_features = opt.num_features();
  o->eps = opt.eps();
  o->momentum = opt.momentum().value_or(0.1);
  o->affine = opt.affine();
  o->track_running_stats = opt.track_running_stats();
  *state = bn;
  return true;
}

// A SyncBatchNorm with `bn`'s options and values, or null when `child` is no BatchNorm.
SyncBatchNorm sync_of(const std::shared_ptr<torch::nn::Module>& child, const std::string& path,
                      int process_set) {
  SyncBatchNormOptions o(1);
  std::shared_ptr<torch::nn::Module> bn;
  if (!batch_norm_of<torch::nn::BatchNorm1dImpl>(child, &o, &bn) &&
      !batch_norm_of<torch::nn::BatchNorm2dImpl>(child, &o, &bn) &&
      !batch_norm_of<torch::nn::BatchNorm3dImpl>(child, &o, &bn)) {
    return SyncBatchNorm(nullptr);
  }
  o.process_set = process_set;
  o.name = "syncbn." + path;
  SyncBatchNorm sync(o);
  torch::NoGradGuard no_grad;
  // The layer's values: parameters, running statistics (make the optimizer after).
  const auto params = bn->named_parameters(/*recurse=*/false);
  const auto buffers = bn->named_buffers(/*recurse=*/false);
  if (sync->weight.defined() && params.contains("weight")) {
    sync->weight.set_data(params["weight"].detach().clone());
  }
  if (sync->bias.defined() && params.contains("bias")) {
    sync->bias.set_data(params["bias"].detach().clone());
  }
  for (const char* b : {"running_mean", "running_var", "num_batches_tracked"}) {
    if (!buffers.contains(b)) continue;
    torch::Tensor& mine = std::string(b) == "running_mean"  ? sync->running_mean
                          : std::string(b) == "running_var" ? sync->running_var
                                                            : sync->num_batches_tracked;
    if (mine.defined()) mine.set_data(buffers[b].detach().clone());
  }
  sync->train(bn->is_training());
  return sync;
}

int convert_below(torch::nn::Module& module, const std::string& path, int process_set) {
  int replaced = 0;
  const auto children = module.named_children();
  auto path_of = [&](const std::string& name) { return path.empty() ? name : path + "." + name; };
  // The containers whose elements kolo can reach: Sequential and ModuleList hold them in
  // a list beside the registered children (both are replaced).
  if (auto* seq = dynamic_cast<torch::nn::SequentialImpl*>(&module)) {
    std::size_t i = 0;
    for (auto it = seq->begin(); it != seq->end(); ++it, ++i) {
      const std::string name = children.keys()[i];
      if (SyncBatchNorm sync = sync_of(it->ptr(), path_of(name), process_set)) {
        *it = torch::nn::AnyModule(sync);
        module.replace_module(name, sync.ptr());
        ++replaced;
      } else {
        replaced += convert_below(*it->ptr(), path_of(name), process_set);
      }
    }
    return replaced;
  }
  if (auto* list = dynamic_cast<torch::nn::ModuleListImpl*>(&module)) {
    std::size_t i = 0;
    for (auto it = list->begin(); it != list->end(); ++it, ++i) {
      const std::string name = children.keys()[i];
      if (SyncBatchNorm sync = sync_of(*it, path_of(name), process_set)) {
        *it = sync.ptr();
        module.replace_module(name, sync.ptr());
        ++replaced;
      } else {
        replaced += convert_below(**it, path_of(name), process_set);
      }
    }
    return replaced;
  }
  // Any other module keeps its children in fields of its own as well, which no generic
  // swap reaches: replacing the registered child would leave forward() on the old layer.
  for (const auto& item : children) {
    if (sync_of(item.value(), path_of(item.key()), process_set)) {
      throw Error(ErrorCode::kInvalidArgument,
                  "convert_sync_batchnorm: the BatchNorm at '" + path_of(item.key()) +
                      "' is a field of a module of your own, which kolo cannot swap (libtorch "
                      "modules keep their children in their own fields): construct a "
                      "kolo::SyncBatchNorm there instead (or hold the layer in a "
                      "torch::nn::Sequential or ModuleList, which kolo can convert)");
    }
    replaced += convert_below(*item.value(), path_of(item.key()), process_set);
  }
  return replaced;
}

}  // namespace

int convert_sync_batchnorm(torch::nn::Module& module, int process_set) {
  return convert_below(module, "", process_set);
}

}  // namespace kolo
