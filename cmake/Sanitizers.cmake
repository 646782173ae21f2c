# TIDE_SANITIZE: "address;undefined" (ASan + UBSan + LeakSanitizer) or "thread" (TSan).
# Applied to every target of this build so that tests and library agree.
if(TIDE_SANITIZE)
  string(REPLACE ";" "," _tide_san "${TIDE_SANITIZE}")
  if("thread" IN_LIST TIDE_SANITIZE AND "address" IN_LIST TIDE_SANITIZE)
    message(FATAL_ERROR "TIDE_SANITIZE: thread and address cannot be combined")
  endif()
  # C++ only: nvcc does not take these flags (CI builds sanitizer runs with TIDE_CUDA=OFF).
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${_tide_san}>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX>:-g>)
  add_link_options(-fsanitize=${_tide_san})
  if("undefined" IN_LIST TIDE_SANITIZE)
    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=undefined>)
  endif()
  message(STATUS "tide: sanitizers ${_tide_san}")
endif()
