#!/bin/sh
# The whole test suite, as CI runs it:
#   1. a Release build with warnings as errors, and every test (ctest);
#   2. an AddressSanitizer + UndefinedBehaviorSanitizer build, and the tests again except those
#      labelled slow: the parity runs on the longer clips, whose code paths the short clip's runs
#      take too (see tests/CMakeLists.txt).
set -eu
JOBS=${JOBS:-2}
cmake -B build -S . -DCMAKE_BUILD_TYPE=Release -DMIMI_WERROR=ON
cmake --build build -j"$JOBS"
ctest --test-dir build -j"$JOBS" --output-on-failure
cmake -B build-asan -S . -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMIMI_SANITIZE=ON -DMIMI_WERROR=ON
cmake --build build-asan -j"$JOBS"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan -j"$JOBS" --output-on-failure -LE slow
