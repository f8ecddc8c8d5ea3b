# Convenience targets; the build itself is CMake (CMakeLists.txt).
#   make demo    build everything, then encode and decode examples/speech_en.wav
#   make check   the whole test suite: a warnings-as-errors build, then an ASan+UBSan build
BUILD ?= build
JOBS ?= 2

.PHONY: all demo check clean
all:
	cmake -B $(BUILD) -S . -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j$(JOBS)

demo: all
	sh scripts/demo.sh $(BUILD)

check:
	sh scripts/check.sh

clean:
	rm -rf build build-asan
