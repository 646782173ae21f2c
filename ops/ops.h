// Everything in ops/: include this to use tide's operators.
#pragma once

#include "ops/attention.h"
#include "ops/autocast.h"
#include "ops/autograd.h"
#include "ops/checkpoint.h"
#include "ops/conv.h"
#include "ops/creation.h"
#include "ops/debug.h"
#include "ops/elementwise.h"
#include "ops/gather.h"
#include "ops/linalg.h"
#include "ops/norm.h"
#include "ops/op_traits.h"
#include "ops/optim.h"
#include "ops/reduce.h"
