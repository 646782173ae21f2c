// tide's traced mode: trace::function (capture, plan, fuse and replay a function) and
// trace::loop (a loop node with a runtime count). See trace/function.h and trace/loop.h.
#pragma once

#include "trace/function.h"
#include "trace/fusion.h"
#include "trace/loop.h"
