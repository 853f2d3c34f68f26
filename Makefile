# The two commands a user needs: `make demo` and `make test`.
# Both install what is missing first (see scripts/ensure-deps.sh).

JOBS    ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
# (The suites learn "dmda" models within each runtime, never from this
# machine's model file: what earlier runs taught would move their tasks.)
CTEST   := WEFT_PERFMODEL=off ctest --output-on-failure --no-tests=error -j $(JOBS)

.PHONY: all deps build demo test fuzz test-release test-asan test-tsan bench python-venv python-test python-typecheck python-test-asan python-test-tsan python-test-ft python-test-tsan-ft clean

all: build

deps:
	@scripts/ensure-deps.sh

# Release-like build with warnings as errors: the one the demo, the benchmarks
# and the first test run use.
build: deps
	cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEFT_WERROR=ON -DWEFT_BUILD_TESTS=ON -DWEFT_BUILD_BENCH=ON $(CMAKE_FLAGS) >/dev/null
	cmake --build build -j $(JOBS)

demo: build python-venv
	@WEFT_TRACE=build/demo-trace.json build/examples/weft-demo
	@build/examples/weft-demo-tiles build/demo-trace-tiles.json
	@if [ -x build/examples/weft-demo-halo ]; then \
	  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
	    mpirun -np 2 build/examples/weft-demo-halo build/demo-trace-halo; \
	else echo "weft-demo-halo: not built (no MPI found)"; fi
	@.venv/bin/python python/demo.py build/demo-trace-py.json
	@build/apps/cloverleaf/weft-cloverleaf --devices cpu,vgpu:4 --trace build/demo-trace-clover.json \
	  --png build/clover-density.png apps/cloverleaf/decks/clover_bm_short.in
	@if [ -x build/apps/cholesky/weft-cholesky ]; then \
	  build/apps/cholesky/weft-cholesky -n 2048 -b 256 --devices cpu --workers 2 --check && \
	  build/apps/cholesky/weft-cholesky -n 2048 -b 256 --devices cpu,vgpu:4 --workers 2 --check \
	    --trace build/demo-trace-chol.json; \
	else echo "weft-cholesky: not built (no OpenBLAS / LAPACKE found)"; fi

test: test-release test-asan test-tsan python-test python-test-asan python-test-tsan python-test-ft python-test-tsan-ft
	@echo "make test: all suites passed"

test-release: build
	cd build && $(CTEST)

test-asan: deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DWEFT_WERROR=ON -DWEFT_SANITIZE=address -DWEFT_BUILD_TESTS=ON -DWEFT_BUILD_BENCH=OFF >/dev/null
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 WEFT_TEST_SCALE=sanitizer $(CTEST)

test-tsan: deps
	cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEFT_WERROR=ON -DWEFT_SANITIZE=thread -DWEFT_BUILD_TESTS=ON -DWEFT_BUILD_BENCH=OFF >/dev/null
	cmake --build build-tsan -j $(JOBS)
	cd build-tsan && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 WEFT_TEST_SCALE=sanitizer $(CTEST)

# --- Python front end (python/) -----------------------------------------
python-venv: deps
	@scripts/ensure-venv.sh

# The suite, then the type check (scripts/typecheck.sh: mypy --strict over
# the package, its stubs, the examples and python/tests/typing_usage.py, and
# stubtest of the stubs against the installed extension).
python-test: python-venv
	.venv/bin/python -m pytest -q python/tests
	scripts/typecheck.sh

python-typecheck: python-venv
	scripts/typecheck.sh

# The same suite with the extension and core built under ASan+UBSan / TSan.
python-test-asan: deps
	scripts/python-sanitized-test.sh address

python-test-tsan: deps
	scripts/python-sanitized-test.sh thread

# The suite on free-threaded CPython 3.13 with the GIL disabled (the first
# run on a machine builds the interpreter into ~/.cache/weft/python-ft), and
# again with the extension under TSan (python/tsan-ft.supp says what of
# CPython's own is suppressed, and why).
python-test-ft: deps
	scripts/python-ft.sh

python-test-tsan-ft: deps
	scripts/python-sanitized-test.sh thread ft

# --- benchmarks (bench/) ------------------------------------------------
bench: build python-venv
	@.venv/bin/python -m pip install -q -r bench/requirements.txt
	@bench/run.sh

# A long run of the random-program tester (tests/test_fuzz.c): 100000 seeds
# over every core (scripts/fuzz.sh SEEDS FEATURES for other counts).
fuzz: build
	scripts/fuzz.sh

clean:
	rm -rf build build-asan build-tsan build-py-asan build-py-tsan build-py-tsan-ft build-ft build-compare
