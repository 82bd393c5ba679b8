# mpitrain — the two commands a user needs:
#   make run    install what is missing, build, prepare the sample data, train a small model
#   make test   the same set-up, then every test (ctest)
# Also: make build, make data, make bench, make clean.
# Variables: BUILD, NP, PP, THREADS, OUT, CONFIG, CMAKE_FLAGS.

# The demo's layout follows the cores this machine has (override any of NP, PP, THREADS, OUT):
# NP ranks, the largest of 1, 2, 4 that fits (the global batch divides by it), THREADS = cores / NP
# each, so the ranks never share a core: a rank waiting for a core looks like exposed communication.
# PP 1: on this tiny model a pipeline's stages mostly wait on each other (2 stages on 2 cores: ~35%
# of the step, and a WARNING); with data parallelism only the gradient all-reduce is exposed.
CORES       := $(shell nproc)
BUILD       ?= build
NP          ?= $(if $(filter 0 1,$(CORES)),1,$(if $(filter 2 3,$(CORES)),2,4))
PP          ?= 1
THREADS     ?= $(shell echo $$(( $(CORES) / $(NP) > 0 ? $(CORES) / $(NP) : 1 )))
OUT         ?= runs/sample
CONFIG      ?= input/tiny-gpt2.ini
CMAKE_FLAGS ?=
JOBS        ?= $(shell nproc)
DATA        := $(BUILD)/data

# cmake --build runs make again: without this, every sub-make prints "Entering directory" lines.
MAKEFLAGS += --no-print-directory

# mpirun refuses root unless told; the tests oversubscribe small machines on purpose.
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The demo, printed as a command to copy: the root variables only where they are needed;
# --oversubscribe only lets a larger NP start; --bind-to none lets a rank's threads spread.
ROOT_ENV := $(if $(filter 0,$(shell id -u)),OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 )
DEMO = $(ROOT_ENV)mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS=$(THREADS) -np $(NP) \
  $(BUILD)/trainer --config $(CONFIG) --pp $(PP) --threads $(THREADS) \
  --train-data $(DATA)/train.h5 --val-data $(DATA)/val.h5 --out-dir $(OUT) --overwrite

.PHONY: all deps build data run test bench clean

all: build

deps:
	@bash tools/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) > $(BUILD).cmake.log 2>&1 \
	  || { cat $(BUILD).cmake.log; exit 1; }
	@cmake --build $(BUILD) -j $(JOBS)

data: build
	@BUILD_DIR=$(abspath $(BUILD)) bash tools/prepare-sample-data.sh $(DATA)

run: data
	@echo "demo: $(NP) ranks x $(THREADS) threads on $(CORES) cores, pp $(PP) (make run NP=.. PP=.. THREADS=.. OUT=..)"
	$(DEMO)
	@echo "demo: metrics.jsonl, report.json and run.ini in $(OUT)/; rerun it with the mpirun line above"
	@[ $$(( $(NP) * $(THREADS) )) -le $(CORES) ] || echo "demo: $(NP) ranks x $(THREADS) threads" \
	  "share $(CORES) cores: a rank waiting for a core counts as exposed communication"
	@[ "$(PP)" = 1 ] || echo "demo: with pp $(PP) the stages wait on each other (the pipeline" \
	  "bubble, and more on this tiny model): that counts as exposed communication"

test: data
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) --timeout 900

bench: build
	@bash bench/run.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(BUILD).cmake.log
