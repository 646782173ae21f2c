// Libraries loaded on first use (dlopen) rather than linked: cuBLASLt and NCCL, so that a
// CUDA build's CPU-only runs never load them and a machine without one still runs the rest.
// Errors are tide::Error("[op] ...") naming the library and what to do about it.
#pragma once

#include <dlfcn.h>

#include <initializer_list>
#include <string>

#include "core/error.h"

namespace tide::detail {

// The first of `names` that dlopen loads (RTLD_NOW | RTLD_LOCAL); it stays loaded for the
// process. Throws "[op] cannot load <what> (<first name>): <dlerror>; <hint>".
inline void* load_library(std::initializer_list<const char*> names, const char* what,
                          const char* op, const char* hint) {
  for (const char* name : names)
    if (void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return lib;
  throw Error(op, std::string("cannot load ") + what + " (" + *names.begin() + "): " + dlerror() +
                      "; " + hint);
}

// Looks `name` up in lib into f. Throws "[op] <what> has no <name>: <dlerror>".
template <class F>
void bind_symbol(void* lib, F& f, const char* name, const char* what, const char* op) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  if (!f) throw Error(op, std::string(what) + " has no " + name + ": " + dlerror());
}

}  // namespace tide::detail
