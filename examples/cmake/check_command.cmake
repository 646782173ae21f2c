# Runs a command and checks how it ended:
#   cmake -DCMD=prog [-DARGS=a;b] -DEXPECT=zero|nonzero|<exit code>
#   [-DEXPECT_OUTPUT=regex] (matched against stdout + stderr)
#   [-DREJECT_OUTPUT=regex] (must not match: e.g. output of work that should not have run)
#   [-DEXPECT_FILE=path [-DEXPECT_FILE_REGEX=regex]] (the file must be written by the run;
#    the regex is matched against its first EXPECT_FILE_LIMIT bytes, default 4096)
#   -P check_command.cmake
# "nonzero" means a normal exit with a code other than 0, a number that exact exit code: a
# crash (a signal) fails the check either way. Environment variables are set with the
# test's ENVIRONMENT property (the command inherits them). An empty element of ARGS
# ("a;;b", "--csv;") is passed as an empty argument.
if(NOT DEFINED CMD OR NOT DEFINED EXPECT)
  message(FATAL_ERROR "check_command.cmake needs -DCMD=... and -DEXPECT=zero|nonzero|<code>")
endif()
if(DEFINED EXPECT_FILE)
  file(REMOVE ${EXPECT_FILE})
endif()

# ${ARGS} unquoted would drop empty elements: build the call with each argument bracketed.
set(call "execute_process(COMMAND [==[${CMD}]==]")
foreach(a IN LISTS ARGS)
  string(APPEND call " [==[${a}]==]")
endforeach()
cmake_language(EVAL CODE "${call} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)")
message("${out}${err}")

if(NOT rc MATCHES "^[0-9]+$")
  message(FATAL_ERROR "'${CMD} ${ARGS}' did not exit normally: ${rc}")
endif()
if(EXPECT STREQUAL "zero" AND NOT rc EQUAL 0)
  message(FATAL_ERROR "'${CMD} ${ARGS}' exited with ${rc}, expected 0")
elseif(EXPECT STREQUAL "nonzero" AND rc EQUAL 0)
  message(FATAL_ERROR "'${CMD} ${ARGS}' exited with 0, expected a nonzero exit code")
elseif(EXPECT MATCHES "^[0-9]+$" AND NOT rc EQUAL EXPECT)
  message(FATAL_ERROR "'${CMD} ${ARGS}' exited with ${rc}, expected ${EXPECT}")
endif()
if(DEFINED EXPECT_OUTPUT AND NOT "${out}${err}" MATCHES "${EXPECT_OUTPUT}")
  message(FATAL_ERROR "the output of '${CMD} ${ARGS}' does not match '${EXPECT_OUTPUT}'")
endif()
if(DEFINED REJECT_OUTPUT AND "${out}${err}" MATCHES "${REJECT_OUTPUT}")
  message(FATAL_ERROR "the output of '${CMD} ${ARGS}' matches '${REJECT_OUTPUT}'")
endif()
if(DEFINED EXPECT_FILE)
  if(NOT EXISTS ${EXPECT_FILE})
    message(FATAL_ERROR "'${CMD} ${ARGS}' did not write ${EXPECT_FILE}")
  endif()
  if(DEFINED EXPECT_FILE_REGEX)
    if(NOT DEFINED EXPECT_FILE_LIMIT)
      set(EXPECT_FILE_LIMIT 4096)
    endif()
    file(READ ${EXPECT_FILE} content LIMIT ${EXPECT_FILE_LIMIT})
    if(NOT content MATCHES "${EXPECT_FILE_REGEX}")
      message(FATAL_ERROR "${EXPECT_FILE} does not contain '${EXPECT_FILE_REGEX}'")
    endif()
  endif()
endif()
