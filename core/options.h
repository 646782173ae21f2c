// Options structs with chainable setters (docs/contributing.md, Comments and documents):
// TIDE_ARG declares an option's member and its setter in one line, as PyTorch's TORCH_ARG
// does, so every options struct reads the same way. Setters of several values at once
// (betas(b1, b2)) stay hand-written.
#pragma once

#include <utility>

// In a struct: `TIDE_ARG(double, momentum) = 0;` declares the public member `momentum_`
// (default 0) and `momentum(double)`, which sets it and returns the struct, so calls chain:
// `SGDOptions(0.1).momentum(0.9).nesterov(true)`.
#define TIDE_ARG(Type, name) TIDE_ARG_AS(Type, name, name##_)

// The same with the member named `member` instead of `name_` (LinearOptions' `bias(bool)`
// sets `with_bias`).
#define TIDE_ARG_AS(Type, name, member)    \
  auto name(Type value)->decltype(*this) { \
    member = std::move(value);             \
    return *this;                          \
  }                                        \
  Type member
