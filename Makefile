# mpitrain — the two commands a user needs:
#   make run    install what is missing, build, prepare the sample data, train a small model
#   make test   the same set-up, then every test (ctest)
# Also: make build, make data, make bench, make clean. Variables: BUILD, NP, PP, CONFIG, CMAKE_FLAGS.

BUILD       ?= build
NP          ?= 4
PP          ?= 2
CONFIG      ?= input/tiny-gpt2.ini
CMAKE_FLAGS ?=
JOBS        ?= $(shell nproc)
DATA        := $(BUILD)/data

# mpirun refuses root unless told; tests and `make run` oversubscribe small machines on purpose.
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN := mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS=1

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
	$(MPIRUN) -np $(NP) $(BUILD)/trainer --config $(CONFIG) --pp $(PP) \
	  --train-data $(DATA)/train.h5 --val-data $(DATA)/val.h5 --out-dir runs/sample --overwrite

test: data
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) --timeout 900

bench: build
	@bash bench/run.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(BUILD).cmake.log
