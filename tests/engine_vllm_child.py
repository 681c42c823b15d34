"""Child script of tests/test_engines.py: vLLM's own FlashInfer-calling code under ``torch.compile(fullgraph=True)``.

Run in a fresh interpreter with PYTHONPATH=<flashinfer site> (patched with fp4patch's default specs, or pristine):
``python engine_vllm_child.py '{"scan_probe": PATH, "child_support": PATH, "engine": SITE, "extra": [SITE...]}'``;
prints one line ``FP4PATCH-VLLM-RESULT <json>``.

``engine`` is the unpacked ``vllm`` wheel (0.34.0, its Python sources, installed without its dependencies,
``tests/conftest.py: engine_site``); ``extra`` are site-packages of the few dependencies installed rather than stood
in for (msgspec). The set-up is ``tests/child_support.py``'s (device stubs, stand-ins for :data:`MISSING` where not
installed and only for vLLM's modules, CUDA reported while vLLM is imported), with vLLM's CUDA platform selected
(its NVML probe needs a driver) and ``VLLM_HAS_FLASHINFER_CUBIN=1`` (vLLM registers its FlashInfer ops only when
FlashInfer's kernels can be had: flashinfer-cubin installed, or nvcc and ninja for the JIT; this machine has
neither). Each case is one ``torch.compile(fullgraph=True)`` of vLLM's own call on fake CUDA tensors
(``child_support.trace``), 8 tokens of hidden size 7168:

* ``per_token``: ``quantize_nvfp4_per_token_input(hidden_states)``
  (``vllm/model_executor/layers/quantization/utils/flashinfer_utils.py``): FlashInfer's ``nvfp4_quantize`` with
  a float global scale, ``sfLayout=SfLayout.layout_linear``, ``per_token_activation=True``; called by the TRT-LLM
  NVFP4 MoE experts (``fused_moe/experts/trtllm_nvfp4_moe.py``) and the CuTe-DSL MoE experts on per-token
  checkpoints;
* ``own[...]``: vLLM's own custom ops around FlashInfer, each expected to stay one opaque node:
  ``flashinfer_quant_nvfp4_8x4_sf_layout`` (``vllm::flashinfer_nvfp4_quantize``), ``flashinfer_scaled_fp4_mm``
  (``vllm::flashinfer_mm_fp4``), ``flashinfer_scaled_fp8_mm`` (``vllm::bmm_fp8``), ``flashinfer_mxfp8_quantize_8x4``
  (``vllm::flashinfer_mxfp8_quantize_8x4``, the MXFP8 linear's activation quantizer), all in
  ``vllm/utils/flashinfer.py``, where 0.34.0 calls each op only under Dynamo (``eager_bypass_custom_op``,
  ``vllm/utils/torch_utils.py``: eager calls go to FlashInfer directly); ``mxfp8_e4m3_quantize``
  (``vllm::mxfp8_quantize``, ``quantization/utils/mxfp8_utils.py``: FlashInfer's ``mxfp8_quantize`` with
  ``backend="cute-dsl"``); and the MoE layer's forward op that ``MoERunner._select_forward`` picks on CUDA
  (``fused_moe/runner/moe_runner.py``): its name is reported as ``moe_forward_selected``, and
  ``own[moe_forward]`` traces a call of it.

Besides ``cases``: ``torch``, ``stand_ins`` (the entries of :data:`MISSING` served), ``unneeded_stand_ins`` (entries
neither served nor installed), ``platform`` (vLLM's current platform class), ``moe_forward_selected``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import types

import torch

MARK = "FP4PATCH-VLLM-RESULT "
P = json.loads(sys.argv[1])
for where in reversed([P["engine"], *P.get("extra", [])]):
    sys.path.insert(1, where)  # after PYTHONPATH's FlashInfer site (sys.path[0] is this script's folder)
os.environ["VLLM_HAS_FLASHINFER_CUBIN"] = "1"

M = 8  # tokens
K = 7168  # hidden size
N = 2048  # output features of a projection
VLLM_IMPORTERS = ("vllm",)

EXTENSION = "a compiled CUDA extension of the vllm wheel (only its Python sources are unpacked; it needs CUDA libraries)"
#: Packages vLLM 0.34.0 imports at module level on the way to these functions that a CPU test interpreter lacks
#: (none is called on the traced paths: ``stand_ins`` of each case must stay empty).
MISSING = {
    "transformers": ("model configs and tokenizers", VLLM_IMPORTERS),
    "huggingface_hub": ("model download", VLLM_IMPORTERS),
    "safetensors": ("checkpoint loading", VLLM_IMPORTERS),
    "regex": ("text processing (served as the standard library's re, whose API it extends)", VLLM_IMPORTERS),
    "psutil": ("process and memory queries", VLLM_IMPORTERS),
    "zmq": ("pyzmq: inter-process messaging of the engine core", VLLM_IMPORTERS),
    "cbor2": ("request hashing", VLLM_IMPORTERS),
    "cachetools": ("caches of the front end", VLLM_IMPORTERS),
    "cloudpickle": ("serialization to workers", VLLM_IMPORTERS),
    "cpuinfo": ("py-cpuinfo: platform detection", VLLM_IMPORTERS),
    "pybase64": ("request decoding", VLLM_IMPORTERS),
    "aiohttp": ("HTTP clients of the front end", VLLM_IMPORTERS),
    "uvloop": ("the server's event loop", VLLM_IMPORTERS),
    "prometheus_client": ("metrics", VLLM_IMPORTERS),
    "xgrammar": ("structured output", VLLM_IMPORTERS),
    "llguidance": ("structured output", VLLM_IMPORTERS),
    "PIL": ("Pillow: multimodal inputs", VLLM_IMPORTERS),
    **{f"vllm.{name}": (EXTENSION, VLLM_IMPORTERS)
       for name in ("_C_stable_libtorch", "_moe_C_stable_libtorch")},
    "yaml": ("PyYAML: config files of the argument parser", VLLM_IMPORTERS),
    "triton": ("GPU kernel compiler: vLLM defines @triton.jit kernels at import (the CPU torch build has none)", VLLM_IMPORTERS),
}
ALIASES = {"regex": "re"}

_spec = importlib.util.spec_from_file_location("_engine_child_support", P["child_support"])
support = importlib.util.module_from_spec(_spec)
sys.modules["_engine_child_support"] = support
_spec.loader.exec_module(support)

probe = support.prepare_torch(torch, P["scan_probe"])
import flashinfer

stand_ins = support.MissingPackages(MISSING, aliases=ALIASES).install()

#: Queries vLLM's compiled extension (``vllm._C_stable_libtorch``, stood in for above) answers at import, as
#: ``torch.ops._C`` ops: name -> (schema, implementation). The answers are the extension's on SM100
#: (``csrc/quantization/w8a8/cutlass/scaled_mm_entry.cu`` of vLLM 0.33.0); none is on the traced paths.
C_QUERIES = {
    "cutlass_scaled_mm_supports_block_fp8": ("(int cuda_device_capability) -> bool", lambda capability: capability >= 90),
}
_c_library = torch.library.Library("_C", "FRAGMENT")
for _name, (_schema, _impl) in C_QUERIES.items():
    _c_library.define(_name + _schema)
    _c_library.impl(_name, _impl, "CompositeExplicitAutograd")
engine_dir = os.path.join(P["engine"], "vllm")

from torch._subclasses.fake_tensor import FakeTensorMode

fake_mode = FakeTensorMode(allow_non_fake_inputs=True)


t = support.tensor_maker(torch, "cuda")  # t(shape, dtype): a fake CUDA tensor of fake_mode


with support.cuda_reported(torch):
    import vllm.platforms
    from vllm.platforms.cuda import CudaPlatform

    vllm.platforms._current_platform = CudaPlatform()  # what vLLM's NVML probe detects on a GPU server
    from vllm.model_executor.layers.fused_moe.runner.moe_runner import MoERunner
    from vllm.model_executor.layers.quantization.utils.flashinfer_utils import quantize_nvfp4_per_token_input
    from vllm.model_executor.layers.quantization.utils.mxfp8_utils import mxfp8_e4m3_quantize
    from vllm.utils.flashinfer import (
        flashinfer_mxfp8_quantize_8x4,
        flashinfer_quant_nvfp4_8x4_sf_layout,
        flashinfer_scaled_fp4_mm,
        flashinfer_scaled_fp8_mm,
    )

    # MoERunner._select_forward reads only the platform and whether the layer has shared experts
    moe_forward = MoERunner._select_forward(types.SimpleNamespace(_shared_experts=None))
    with fake_mode:
        hidden_states = t((M, K), torch.bfloat16)
        global_sf = t((1,), torch.float32)
        a_fp4 = t((M, K // 2), torch.uint8)
        b_fp4 = t((N, K // 2), torch.uint8)
        a_sf = t((M, K // 16), torch.float8_e4m3fn)
        b_sf = t((N, K // 16), torch.float8_e4m3fn)
        alpha = t((1,), torch.float32)
        a_fp8 = t((M, K), torch.float8_e4m3fn)
        b_fp8 = t((N, K), torch.float8_e4m3fn).t()
        scale = t((), torch.float32)
        router_logits = t((M, 256), torch.float32)

stand_ins.withdraw()
stand_ins.arm()

CASES = {
    "per_token": (quantize_nvfp4_per_token_input, (hidden_states,)),
    "own[nvfp4_quantize]": (flashinfer_quant_nvfp4_8x4_sf_layout, (hidden_states, global_sf)),
    "own[mm_fp4]": (lambda a, b, sa, sb, al: flashinfer_scaled_fp4_mm(a, b, sa, sb, al, torch.bfloat16, "cutlass"),
                    (a_fp4, b_fp4, a_sf, b_sf, alpha)),
    "own[bmm_fp8]": (lambda a, b, sa, sb: flashinfer_scaled_fp8_mm(a, b, sa, sb, torch.bfloat16), (a_fp8, b_fp8, scale, scale)),
    "own[mxfp8_quantize_8x4]": (flashinfer_mxfp8_quantize_8x4, (hidden_states,)),
    "own[mxfp8_quantize]": (mxfp8_e4m3_quantize, (hidden_states,)),
    "own[moe_forward]": (lambda x, logits: moe_forward(x, logits, None, None, "model.layers.3.mlp.experts", 0), (hidden_states, router_logits)),
}

flashinfer_dir = os.path.dirname(os.path.realpath(flashinfer.__file__))
cases = {}
for name, (fn, args) in CASES.items():
    if P.get("only") and name not in P["only"]:
        continue
    cases[name] = support.trace(fn, args, torch=torch, probe=probe, fake_mode=fake_mode, flashinfer_dir=flashinfer_dir,
                                engine_dir=engine_dir, stand_ins=stand_ins)
support.emit(MARK, {
    "torch": torch.__version__, "cases": cases, "stand_ins": stand_ins.missing(), "unneeded_stand_ins": stand_ins.unneeded(),
    "platform": type(vllm.platforms._current_platform).__name__, "moe_forward_selected": str(moe_forward),
})
