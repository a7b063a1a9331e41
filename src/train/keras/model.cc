// Model (model.h): replicas, compile, and the TrainingHost side that callbacks use.
//
// Not for: the training, evaluation and prediction loops (fit.cc).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/logging.h"
#include "kolo/error.h"
#include "kolo/kolo.h"
#include "train/keras/model_impl.h"
#include "train/strategies/strategy_impl.h"

namespace kolo::train {

namespace {

NamedTensors named(const std::vector<std::string>& names, const std::vector<torch::Tensor>& ts) {
  NamedTensors out;
  for (std::size_t i = 0; i < names.size(); ++i) out.insert(names[i], ts[i]);
  return out;
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : "\n") + n;
  return out;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

}  // namespace

Model::Model(std::shared_ptr<torch::nn::Module> module, Forward forward, Strategy strategy)
    : impl_(std::make_unique<Impl>(std::move(strategy), std::move(forward))) {
  Impl& m = *impl_;
  m.strategy_impl = m.strategy.impl_;
  if (!module) throw Error(ErrorCode::kInvalidArgument, "Model: the module is null");
  const auto& devices = m.strategy.devices();
  module->to(devices[0]);
  m.replicas.push_back(module);
  for (std::size_t r = 1; r < devices.size(); ++r) {
    try {
      m.replicas.push_back(module->clone(devices[r]));
    } catch (const std::exception& e) {
      throw Error(ErrorCode::kInvalidArgument,
                  std::string("Model: cannot make replica ") + std::to_string(r) + " of " +
                      m.strategy.name() + " (" + std::to_string(devices.size()) +
                      " replicas): the module must be cloneable (derive from "
                      "torch::nn::Cloneable, as torch::nn's modules do): " +
                      e.what());
    }
  }
  for (const auto& p : module->named_parameters(true)) m.param_names.push_back(p.key());
  for (const auto& b : module->named_buffers(true)) m.buffer_names.push_back(b.key());
  for (const auto& r : m.replicas) {
    m.params.push_back(r->parameters(true));
    m.buffers.push_back(r->buffers(true));
  }
  // An elastic job's worker may be one that joins while the others train: its first
  // collective must be elastic fit's sync (which gives it the chief's weights), so the
  // weights are not broadcast here.
  if (m.workers() > 1 && !elastic_job(*m.strategy_impl)) {
    // TensorFlow broadcasts each variable's initial value from the chief.
    broadcast_parameters(named(m.param_names, m.params[0]), 0);
    broadcast_parameters(named(m.buffer_names, m.buffers[0]), 0);
  }
  m.copy_to_replicas();
}

Model::~Model() = default;

void Model::Impl::copy_to_replicas() {
  if (local() == 1) return;
  strategy.for_each_replica([this](int r) {
    if (r == 0) return;
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < params[0].size(); ++i) params[r][i].copy_(params[0][i]);
    for (std::size_t i = 0; i < buffers[0].size(); ++i) buffers[r][i].copy_(buffers[0][i]);
  });
}

void Model::compile(const OptimizerSpec& optimizer, const LossSpec& loss,
                    const std::vector<MetricSpec>& metrics) {
  Impl& m = *impl_;
  m.distributed.reset();  // releases the parameters' names before a new one claims them
  m.optimizer = make_optimizer(optimizer, m.params[0]);
  m.optimizer_spec = optimizer;
  m.loss = resolve_loss(loss);
  m.metric_specs = metrics;
  m.metrics.clear();
  m.distributed = m.strategy_impl->extended->distributed_optimizer(m);
  m.compiled = true;
}

void Model::Impl::resolve_metrics(const torch::Tensor& x, const torch::Tensor& y) {
  if (metrics.size() == metric_specs.size() && !metric_specs.empty()) return;
  metrics.clear();
  metric_offsets.clear();
  state_size = 2;
  if (metric_specs.empty()) return;
  torch::Tensor probe_out;
  {
    torch::NoGradGuard no_grad;
    const bool training = replicas[0]->is_training();
    replicas[0]->eval();
    probe_out = forward(*replicas[0], x.slice(0, 0, 1).to(strategy.devices()[0]));
    replicas[0]->train(training);
  }
  for (const auto& spec : metric_specs) {
    metrics.push_back(resolve_metric(spec, probe_out, y.slice(0, 0, 1)));
    metric_offsets.push_back(state_size);
    state_size += metrics.back()->state_size();
  }
}

std::vector<double> Model::Impl::sum_over_workers(const std::vector<double>& state) {
  if (workers() == 1) return state;
  torch::Tensor t = torch::tensor(state, torch::kFloat64);
  t = kolo::allreduce(t, {.name = "train.eval_metrics", .op = ReduceOp::kSum});
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

Logs Model::Impl::logs_of(const std::vector<double>& state, const std::string& prefix) const {
  Logs logs;
  logs.set(prefix + "loss", state[1] > 0 ? state[0] / state[1] : 0.0);
  for (std::size_t i = 0; i < metrics.size(); ++i) {
    logs.set(prefix + metrics[i]->name(), metrics[i]->result(&state[metric_offsets[i]]));
  }
  return logs;
}

torch::nn::Module& Model::module() { return *impl_->replicas[0]; }
const Strategy& Model::strategy() const { return impl_->strategy; }

torch::optim::Optimizer& Model::optimizer() {
  if (!impl_->optimizer) {
    throw Error(ErrorCode::kInvalidArgument, "Model::optimizer: call compile() first");
  }
  return *impl_->optimizer;
}

std::vector<std::string> Model::metrics_names() const {
  std::vector<std::string> out = {"loss"};
  for (const auto& m : impl_->metrics) out.push_back(m->name());
  if (impl_->metrics.empty()) {
    for (const auto& spec : impl_->metric_specs) {
      out.push_back(std::holds_alternative<std::string>(spec) ? std::get<std::string>(spec)
                                                              : std::get<MetricPtr>(spec)->name());
    }
  }
  return out;
}

// --- TrainingHost ----------------------------------------------------------------------------

bool Model::stop_training() const { return impl_->stop; }
void Model::set_stop_training(bool stop) { impl_->stop = stop; }

double Model::learning_rate() const {
  if (!impl_->optimizer)
    throw Error(ErrorCode::kInvalidArgument, "learning_rate: call compile() first");
  return impl_->optimizer->param_groups().at(0).options().get_lr();
}

void Model::set_learning_rate(double lr) {
  if (!impl_->optimizer)
    throw Error(ErrorCode::kInvalidArgument, "set_learning_rate: call compile() first");
  if (!(lr >= 0)) {
    throw Error(
        ErrorCode::kInvalidArgument,
        "set_learning_rate: the learning rate must be a number >= 0, not " + std::to_string(lr));
  }
  for (auto& g : impl_->optimizer->param_groups()) g.options().set_lr(lr);
}

std::optional<double> Model::momentum() const {
  if (!impl_->optimizer) return std::nullopt;
  auto& o = impl_->optimizer->param_groups().at(0).options();
  if (auto* sgd = dynamic_cast<torch::optim::SGDOptions*>(&o)) return sgd->momentum();
  if (auto* rms = dynamic_cast<torch::optim::RMSpropOptions*>(&o)) return rms->momentum();
  return std::nullopt;
}

void Model::set_momentum(double momentum) {
  if (!impl_->optimizer) return;
  for (auto& g : impl_->optimizer->param_groups()) {
    auto& o = g.options();
    if (auto* sgd = dynamic_cast<torch::optim::SGDOptions*>(&o)) sgd->momentum(momentum);
    if (auto* rms = dynamic_cast<torch::optim::RMSpropOptions*>(&o)) rms->momentum(momentum);
  }
}

std::vector<std::pair<std::string, torch::Tensor>> Model::get_weights() const {
  const Impl& m = *impl_;
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (std::size_t i = 0; i < m.param_names.size(); ++i) {
    out.emplace_back(m.param_names[i], m.params[0][i].detach().clone());
  }
  for (std::size_t i = 0; i < m.buffer_names.size(); ++i) {
    out.emplace_back(m.buffer_names[i], m.buffers[0][i].detach().clone());
  }
  return out;
}

void Model::set_weights(const std::vector<std::pair<std::string, torch::Tensor>>& weights) {
  Impl& m = *impl_;
  torch::NoGradGuard no_grad;
  const auto find = [&weights](const std::string& name) -> const torch::Tensor* {
    for (const auto& [n, t] : weights) {
      if (n == name) return &t;
    }
    return nullptr;
  };
  const auto set = [&](const std::vector<std::string>& names, std::vector<torch::Tensor>& into) {
    for (std::size_t i = 0; i < names.size(); ++i) {
      const torch::Tensor* t = find(names[i]);
      if (!t) {
        throw Error(ErrorCode::kInvalidArgument, "set_weights: no value for '" + names[i] +
                                                     "' (give every parameter and buffer)");
      }
      if (t->sizes() != into[i].sizes()) {
        std::ostringstream text;
        text << "set_weights: '" << names[i] << "' is " << into[i].sizes() << " but the value is "
             << t->sizes();
        throw Error(ErrorCode::kInvalidArgument, text.str());
      }
      into[i].copy_(*t);
    }
  };
  set(m.param_names, m.params[0]);
  set(m.buffer_names, m.buffers[0]);
  m.copy_to_replicas();
}

void Model::save(const std::string& path, bool weights_only,
                 const std::vector<std::pair<std::string, double>>& extra) const {
  const Impl& m = *impl_;
  if (!is_chief()) return;
  torch::serialize::OutputArchive archive;
  for (std::size_t i = 0; i < m.param_names.size(); ++i) {
    archive.write("weights/" + m.param_names[i], m.params[0][i].detach(), /*is_buffer=*/true);
  }
  for (std::size_t i = 0; i < m.buffer_names.size(); ++i) {
    archive.write("weights/" + m.buffer_names[i], m.buffers[0][i].detach(), true);
  }
  if (!weights_only && m.optimizer) {
    torch::serialize::OutputArchive opt;
    m.optimizer->save(opt);
    archive.write("optimizer", opt);
  }
  std::vector<std::string> names;
  std::vector<double> values;
  for (const auto& [n, v] : extra) {
    names.push_back(n);
    values.push_back(v);
  }
  archive.write("extra_names", c10::IValue(join(names)));
  archive.write("extra_values", torch::tensor(values, torch::kFloat64), true);
  archive.write("iterations", c10::IValue(static_cast<std::int64_t>(m.iterations)));
  save_archive(archive, path);
}

std::vector<std::pair<std::string, double>> Model::load(const std::string& path,
                                                        bool weights_only) {
  Impl& m = *impl_;
  std::string status = "ok";
  std::vector<std::pair<std::string, double>> extra;
  std::int64_t iterations = m.iterations;
  if (is_chief()) {
    try {
      torch::serialize::InputArchive archive;
      load_archive(archive, path, m.strategy.devices()[0]);
      torch::NoGradGuard no_grad;
      for (std::size_t i = 0; i < m.param_names.size(); ++i) {
        torch::Tensor t;
        archive.read("weights/" + m.param_names[i], t, true);
        m.params[0][i].copy_(t);
      }
      for (std::size_t i = 0; i < m.buffer_names.size(); ++i) {
        torch::Tensor t;
        archive.read("weights/" + m.buffer_names[i], t, true);
        m.buffers[0][i].copy_(t);
      }
      if (!weights_only && m.optimizer) {
        torch::serialize::InputArchive opt;
        archive.read("optimizer", opt);
        m.optimizer->load(opt);
      }
      c10::IValue names, iters;
      torch::Tensor values;
      archive.read("extra_names", names);
      archive.read("extra_values", values, true);
      archive.read("iterations", iters);
      iterations = iters.toInt();
      const auto keys = split_lines(names.toStringRef());
      values = values.to(torch::kCPU);
      for (std::size_t i = 0; i < keys.size() && static_cast<std::int64_t>(i) < values.numel();
           ++i) {
        extra.emplace_back(keys[i], values[static_cast<std::int64_t>(i)].item<double>());
      }
    } catch (const std::exception& e) {
      status = std::string("the chief could not load ") + path + ": " + e.what();
    }
  }
  if (m.workers() > 1) {
    status = broadcast_object(status, 0, m.op_name("load.status"));
    if (status != "ok") throw Error(ErrorCode::kInvalidArgument, status);
    broadcast_parameters(named(m.param_names, m.params[0]), 0);
    broadcast_parameters(named(m.buffer_names, m.buffers[0]), 0);
    if (!weights_only && m.optimizer) broadcast_optimizer_state(*m.optimizer, 0);
    std::string text;
    for (const auto& [k, v] : extra) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.17g", v);
      text += k + "\n" + buf + "\n";
    }
    text += "iterations\n" + std::to_string(iterations) + "\n";
    text = broadcast_object(text, 0, m.op_name("load.extra"));
    const auto lines = split_lines(text);
    extra.clear();
    for (std::size_t i = 0; i + 1 < lines.size(); i += 2) {
      if (lines[i] == "iterations") {
        iterations = std::stoll(lines[i + 1]);
      } else {
        extra.emplace_back(lines[i], std::stod(lines[i + 1]));
      }
    }
  } else if (status != "ok") {
    throw Error(ErrorCode::kInvalidArgument, status);
  }
  m.iterations = iterations;
  m.copy_to_replicas();
  return extra;
}

bool Model::is_chief() const { return impl_->strategy.is_chief(); }
int Model::num_workers() const { return impl_->workers(); }
int Model::num_replicas_in_sync() const { return impl_->strategy.num_replicas_in_sync(); }
std::int64_t Model::iterations() const { return impl_->iterations; }
void Model::resume_at_epoch(int epoch) { impl_->resume_epoch = epoch; }

std::vector<double> Model::average_over_workers(const std::vector<double>& values) {
  Impl& m = *impl_;
  if (m.workers() == 1 || values.empty()) return values;
  torch::Tensor t = torch::tensor(values, torch::kFloat64);
  t = kolo::allreduce(t, {.name = m.op_name("average"), .op = ReduceOp::kAverage});
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

void Model::broadcast_weights_from_chief() {
  Impl& m = *impl_;
  if (m.workers() > 1) {
    broadcast_parameters(named(m.param_names, m.params[0]), 0);
    broadcast_parameters(named(m.buffer_names, m.buffers[0]), 0);
    if (m.optimizer) broadcast_optimizer_state(*m.optimizer, 0);
  }
  m.copy_to_replicas();
}

}  // namespace kolo::train
