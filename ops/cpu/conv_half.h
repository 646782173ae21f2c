// The CPU's convolutions over bfloat16 and float16 (ops/conv_kernels.h): the float32 kernels'
// computation on widened operands, each output rounded once, so the bits are those of the
// float32 op between casts. x is widened as its columns are made (im2col), the weight and
// dy slice by slice into float scratch; the input gradient's sums run in a float32 chunk
// and the weight gradient's over the batch in a float32 accumulator, rounded at the end.
// Called by ops/cpu/conv.cpp's entries. Not a public header.
#pragma once

#include "core/float16.h"
#include "ops/conv_kernels.h"

namespace tide::kernels::cpu {

template <class H>
void half_conv2d(const Conv2dForward<H>& a);
template <class H>
void half_conv2d_input_grad(const Conv2dInputGrad<H>& a);
template <class H>
void half_conv2d_weight_grad(const Conv2dWeightGrad<H>& a);

}  // namespace tide::kernels::cpu
