# README test, run by CTest: extract the first ```c block of README.md (read
# at test time, so edits are picked up without reconfiguring), compile it
# with warnings as errors against the weft headers and static library, and
# run it.
#   cmake -DSOURCE_DIR=... -DWORK_DIR=... -DC_COMPILER=... -DLIB=libweft.a
#         [-DEXTRA_FLAGS="-fsanitize=..."] [-DEXTRA_LIBS="what libweft.a needs"]
#         -P readme_test.cmake
cmake_minimum_required(VERSION 3.18)
foreach(v SOURCE_DIR WORK_DIR C_COMPILER LIB)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "readme_test.cmake: -D${v}=... is required")
  endif()
endforeach()

set(readme "${SOURCE_DIR}/README.md")
if(NOT EXISTS "${readme}")
  message(FATAL_ERROR "${readme} does not exist")
endif()
file(READ "${readme}" text)
string(REPLACE "\r\n" "\n" text "${text}")
# The opening fence: ```c alone on its line (not ```cpp, ```cmake, ...).
string(REGEX MATCH "(^|\n)```[ \t]*c[ \t]*\n" open "${text}")
if(NOT open)
  message(FATAL_ERROR "README.md has no ```c code block")
endif()
string(FIND "${text}" "${open}" at)
string(LENGTH "${open}" olen)
math(EXPR start "${at} + ${olen}")
string(SUBSTRING "${text}" ${start} -1 rest)
string(FIND "${rest}" "\n```" end)
if(end EQUAL -1)
  message(FATAL_ERROR "README.md: the first ```c block is not closed")
endif()
math(EXPR end "${end} + 1")
string(SUBSTRING "${rest}" 0 ${end} code)

file(MAKE_DIRECTORY "${WORK_DIR}")
set(src "${WORK_DIR}/readme_example.c")
set(exe "${WORK_DIR}/readme_example")
file(WRITE "${src}" "${code}")
separate_arguments(extra UNIX_COMMAND "${EXTRA_FLAGS}")
separate_arguments(extra_libs UNIX_COMMAND "${EXTRA_LIBS}")
execute_process(COMMAND "${C_COMPILER}" -std=c11 -Wall -Wextra -Werror ${extra}
    "-I${SOURCE_DIR}/include" "${src}" "${LIB}" ${extra_libs} -pthread -o "${exe}"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the README example (${src}) does not compile:\n${out}${err}")
endif()
execute_process(COMMAND "${exe}" WORKING_DIRECTORY "${WORK_DIR}" TIMEOUT 60
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the README example exited with ${rc}")
endif()
message("README example: compiled and ran (${src})")
