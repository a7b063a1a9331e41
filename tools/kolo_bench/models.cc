// Parameter shapes of ResNet-50 and BERT-base (see models.h), built the way the models
// build their layers, and checked against independently known totals.
#include "kolo_bench/models.h"

#include <stdexcept>

namespace kolo_bench {

namespace {

using Shape = std::vector<std::int64_t>;

void add(ModelParams& m, std::string name, Shape shape) {
  m.params.push_back({std::move(name), std::move(shape)});
}

// torchvision's resnet50: conv1 7x7 + bn1, four stages of Bottleneck blocks (3, 4, 6, 3
// blocks; widths 64, 128, 256, 512; expansion 4; the first block of each stage has a 1x1
// downsample conv + BatchNorm), then fc 2048 -> 1000. Convolutions have no bias;
// BatchNorm has weight and bias (its running statistics are buffers, not parameters).
ModelParams resnet50() {
  ModelParams m{"resnet50", {}};
  auto bn = [&](const std::string& name, std::int64_t c) {
    add(m, name + ".weight", {c});
    add(m, name + ".bias", {c});
  };
  add(m, "conv1.weight", {64, 3, 7, 7});
  bn("bn1", 64);
  const int blocks[] = {3, 4, 6, 3};
  const std::int64_t widths[] = {64, 128, 256, 512};
  std::int64_t in = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const std::int64_t w = widths[stage], out = w * 4;
    for (int b = 0; b < blocks[stage]; ++b) {
      const std::string p = "layer" + std::to_string(stage + 1) + "." + std::to_string(b) + ".";
      add(m, p + "conv1.weight", {w, in, 1, 1});
      bn(p + "bn1", w);
      add(m, p + "conv2.weight", {w, w, 3, 3});
      bn(p + "bn2", w);
      add(m, p + "conv3.weight", {out, w, 1, 1});
      bn(p + "bn3", out);
      if (b == 0) {
        add(m, p + "downsample.0.weight", {out, in, 1, 1});
        bn(p + "downsample.1", out);
      }
      in = out;
    }
  }
  add(m, "fc.weight", {1000, 2048});
  add(m, "fc.bias", {1000});
  return m;
}

// bert-base-uncased (BertModel with pooler): vocabulary 30522, hidden 768, 12 layers,
// intermediate 3072, 512 positions, 2 token types. Linear weights are [out, in].
constexpr std::int64_t kVocab = 30522, kHidden = 768, kLayers = 12, kInter = 3072, kPositions = 512,
                       kTypes = 2;

ModelParams bert_base() {
  ModelParams m{"bert-base", {}};
  auto linear = [&](const std::string& name, std::int64_t out, std::int64_t in) {
    add(m, name + ".weight", {out, in});
    add(m, name + ".bias", {out});
  };
  auto layer_norm = [&](const std::string& name) {
    add(m, name + ".weight", {kHidden});
    add(m, name + ".bias", {kHidden});
  };
  add(m, "embeddings.word_embeddings.weight", {kVocab, kHidden});
  add(m, "embeddings.position_embeddings.weight", {kPositions, kHidden});
  add(m, "embeddings.token_type_embeddings.weight", {kTypes, kHidden});
  layer_norm("embeddings.LayerNorm");
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".";
    linear(p + "attention.self.query", kHidden, kHidden);
    linear(p + "attention.self.key", kHidden, kHidden);
    linear(p + "attention.self.value", kHidden, kHidden);
    linear(p + "attention.output.dense", kHidden, kHidden);
    layer_norm(p + "attention.output.LayerNorm");
    linear(p + "intermediate.dense", kInter, kHidden);
    linear(p + "output.dense", kHidden, kInter);
    layer_norm(p + "output.LayerNorm");
  }
  linear("pooler.dense", kHidden, kHidden);
  return m;
}

// BERT's total in closed form, derived separately from the list above:
// embeddings (V + P + T) H + 2H, per layer 4 (H^2 + H) + 2H + (I H + I) + (H I + H) + 2H,
// pooler H^2 + H.
constexpr std::int64_t bert_base_total() {
  const std::int64_t H = kHidden, I = kInter;
  const std::int64_t per_layer = 4 * (H * H + H) + 2 * H + (I * H + I) + (H * I + H) + 2 * H;
  return (kVocab + kPositions + kTypes) * H + 2 * H + kLayers * per_layer + H * H + H;
}
static_assert(bert_base_total() == 109'482'240, "bert-base-uncased has 109,482,240 parameters");

void check(const ModelParams& m, std::size_t tensors, std::int64_t total) {
  if (m.params.size() != tensors || m.total_numel() != total) {
    throw std::logic_error("kolo_bench: the parameter list of " + m.model + " has " +
                           std::to_string(m.params.size()) + " tensors and " +
                           std::to_string(m.total_numel()) + " parameters; expected " +
                           std::to_string(tensors) + " and " + std::to_string(total));
  }
}

}  // namespace

std::int64_t ParamShape::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::int64_t ModelParams::total_numel() const {
  std::int64_t n = 0;
  for (const auto& p : params) n += p.numel();
  return n;
}

std::vector<std::string> model_choices() { return {"resnet50", "bert-base"}; }

ModelParams model_params(const std::string& model) {
  if (model == "resnet50") {
    ModelParams m = resnet50();
    // torchvision's published count for resnet50 (weights ResNet50_Weights.*: 25,557,032).
    check(m, 161, 25'557'032);
    return m;
  }
  if (model == "bert-base") {
    ModelParams m = bert_base();
    // 5 embedding tensors, 16 per layer, 2 for the pooler.
    check(m, 5 + 16 * kLayers + 2, bert_base_total());
    return m;
  }
  throw std::invalid_argument("unknown model '" + model + "' (resnet50 or bert-base)");
}

}  // namespace kolo_bench
