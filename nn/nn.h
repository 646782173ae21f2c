// Everything in nn/: modules and layers, initialisers, losses, safetensors save/load.
#pragma once

#include "nn/checkpoint.h"
#include "nn/conv.h"
#include "nn/embedding.h"
#include "nn/gpt.h"
#include "nn/init.h"
#include "nn/loss.h"
#include "nn/module.h"
#include "nn/norm.h"
#include "nn/serialize.h"
#include "nn/transformer.h"
