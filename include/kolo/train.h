// kolo's TensorFlow door: distribution strategies and Keras-like training on libtorch.
//
//   #include <kolo/train.h>
//   namespace kt = kolo::train;
//   kt::MirroredStrategy strategy;                     // or MultiWorkerMirroredStrategy()
//   kt::Model model(kt::Sequential({kt::Dense(64, "relu", 784), kt::Dense(10)}), strategy);
//   model.compile(kt::Adam{}, std::make_shared<kt::SparseCategoricalCrossentropy>(true),
//                 {"accuracy"});
//   model.fit(x_train / 255, y_train, {.epochs = 5});
//
// docs/training.md maps each TensorFlow/Keras name to kolo's. Link kolo::train (CMake).
#pragma once

#include "kolo/train/callback.h"
#include "kolo/train/callbacks.h"
#include "kolo/train/checkpoint.h"
#include "kolo/train/data.h"
#include "kolo/train/layers.h"
#include "kolo/train/logs.h"
#include "kolo/train/losses.h"
#include "kolo/train/metrics.h"
#include "kolo/train/model.h"
#include "kolo/train/optimizers.h"
#include "kolo/train/parameter_server.h"
#include "kolo/train/progbar.h"
#include "kolo/train/strategy.h"
#include "kolo/train/summary.h"
