# Install tests, run by CTest as `cmake -DMODE=... -P install_test.cmake`.
#   MODE=install    cmake --install BUILD_DIR --prefix PREFIX (fixture setup)
#   MODE=consumer   configure/build/run tests/consumer with find_package(weft)
#   MODE=pkgconfig  compile tests/consumer/main.c with `pkg-config --cflags
#                   --libs weft` against PREFIX and run it (skipped without
#                   pkg-config)
# A skipped test prints WEFT_TEST_SKIPPED (the test's SKIP_REGULAR_EXPRESSION).
cmake_minimum_required(VERSION 3.18)

foreach(v MODE BUILD_DIR PREFIX SOURCE_DIR WORK_DIR C_COMPILER)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "install_test.cmake: -D${v}=... is required")
  endif()
endforeach()

if(SANITIZE)
  message("WEFT_TEST_SKIPPED: install tests run only in the release build (this one uses -fsanitize=${SANITIZE})")
  return()
endif()

function(run_checked what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${ARGN}\n${out}\n${err}")
  endif()
endfunction()

if(MODE STREQUAL "install")
  file(REMOVE_RECURSE "${PREFIX}")
  run_checked("cmake --install" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${PREFIX}")
  if(NOT EXISTS "${PREFIX}/include/weft.h")
    message(FATAL_ERROR "weft.h was not installed into ${PREFIX}/include")
  endif()
  file(GLOB_RECURSE cfg "${PREFIX}/*/weftConfig.cmake")
  file(GLOB_RECURSE pc "${PREFIX}/*/weft.pc")
  file(GLOB_RECURSE libs "${PREFIX}/*/libweft.*")
  if(NOT cfg OR NOT pc OR NOT libs)
    message(FATAL_ERROR "incomplete install: config '${cfg}', pc '${pc}', libs '${libs}'")
  endif()
  file(GLOB_RECURSE testing "${PREFIX}/*testing.h")
  if(testing)
    message(FATAL_ERROR "the internal testing.h was installed: ${testing}")
  endif()
  message("installed into ${PREFIX}: ${cfg} ${pc} ${libs}")

elseif(MODE STREQUAL "consumer")
  set(bdir "${WORK_DIR}/consumer-build")
  file(REMOVE_RECURSE "${bdir}")
  run_checked("configuring the consumer" "${CMAKE_COMMAND}" -S "${SOURCE_DIR}/tests/consumer"
    -B "${bdir}" "-DCMAKE_PREFIX_PATH=${PREFIX}" "-DCMAKE_C_COMPILER=${C_COMPILER}"
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
  file(STRINGS "${bdir}/CMakeCache.txt" wdir REGEX "^weft_DIR:")
  string(FIND "${wdir}" "${PREFIX}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "find_package(weft) found '${wdir}', not the package installed in ${PREFIX}")
  endif()
  run_checked("building the consumer" "${CMAKE_COMMAND}" --build "${bdir}")
  run_checked("running the shared consumer" "${bdir}/consumer_shared")
  run_checked("running the static consumer" "${bdir}/consumer_static")

elseif(MODE STREQUAL "pkgconfig")
  find_program(PKG_CONFIG NAMES pkg-config pkgconf)
  if(NOT PKG_CONFIG)
    message("WEFT_TEST_SKIPPED: pkg-config not found")
    return()
  endif()
  file(GLOB_RECURSE pc "${PREFIX}/*/weft.pc")
  if(NOT pc)
    message(FATAL_ERROR "no weft.pc under ${PREFIX}")
  endif()
  list(GET pc 0 pc)
  get_filename_component(pcdir "${pc}" DIRECTORY)
  set(ENV{PKG_CONFIG_PATH} "${pcdir}")
  unset(ENV{PKG_CONFIG_LIBDIR})
  execute_process(COMMAND "${PKG_CONFIG}" --cflags --libs weft RESULT_VARIABLE rc
    OUTPUT_VARIABLE flags ERROR_VARIABLE err OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config --cflags --libs weft failed: ${err}")
  endif()
  message("pkg-config --cflags --libs weft: ${flags}")
  execute_process(COMMAND "${PKG_CONFIG}" --variable=libdir weft OUTPUT_VARIABLE libdir
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  execute_process(COMMAND "${PKG_CONFIG}" --variable=includedir weft OUTPUT_VARIABLE incdir
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT EXISTS "${incdir}/weft.h" OR NOT EXISTS "${libdir}")
    message(FATAL_ERROR "weft.pc installed at ${pc} describes includedir '${incdir}' and "
      "libdir '${libdir}', which do not hold the files installed under ${PREFIX}: the .pc "
      "file is not relocatable (it hard-codes the configure-time CMAKE_INSTALL_PREFIX; "
      "prefix=\${pcfiledir}/../.. would follow the install location)")
  endif()
  separate_arguments(flag_list UNIX_COMMAND "${flags}")
  set(exe "${WORK_DIR}/pkgconfig-consumer")
  run_checked("compiling with pkg-config flags" "${C_COMPILER}" -std=c11 -Wall -Wextra -Werror
    "${SOURCE_DIR}/tests/consumer/main.c" ${flag_list} -o "${exe}")
  set(ENV{LD_LIBRARY_PATH} "${libdir}")
  run_checked("running the pkg-config consumer" "${exe}")

else()
  message(FATAL_ERROR "unknown MODE ${MODE}")
endif()
