"""An NVFP4 decoder layer as a serving engine writes it, compiled with ``torch.compile(fullgraph=True)``.

After ``fp4patch apply`` every FlashInfer call below traces as one fp4patch custom op, so the whole
layer is one graph — what SGLang's piecewise CUDA graphs and vLLM's compiled runner need. Unpatched,
Dynamo stops at the first FlashInfer call (its JIT module loader). The layer:

    x -> rms_norm -> fp4_quantize -> mm_fp4 (qkv projection, transposed weight and scales, 0-dim alpha)
      -> a stand-in for attention (elementwise) -> fp4_quantize -> mm_fp4 (output projection) -> + x
      -> rms_norm -> router (bf16 matmul) -> fp4_quantize -> trtllm_fp4_block_scale_moe -> + x

Shapes: ``x`` is ``[M, hidden]`` bf16; NVFP4 weights are packed uint8 ``[N, K/2]`` with float8_e4m3fn
block scales ``[N, K/16]``; the MoE weights are per expert. On a Blackwell GPU (sm100), build the layer
with :func:`random_layer` and call it; anywhere else :func:`compile_on_fake_cuda` compiles it on CPU,
on fake CUDA tensors with the device queries stubbed (fp4patch's scan probe), and reports its graphs
and fp4patch op nodes — what ``tests/test_example_decoder_layer.py`` checks for FlashInfer 0.6.0 and 0.7.4.

Run: ``python examples/nvfp4_decoder_layer.py`` in the environment fp4patch patched: on an sm100 GPU
it compiles and runs the layer (``mode="reduce-overhead"``: CUDA graphs); on a CPU machine (or another
GPU) it compiles it on fake CUDA tensors and prints the graph's fp4patch op nodes. It says which it did.
"""

from __future__ import annotations

import torch
import flashinfer
from flashinfer.fused_moe import RoutingMethodType


class NVFP4DecoderLayer(torch.nn.Module):
    """One decoder layer over NVFP4 weights.

    Args:
        weights: the tensors named in :func:`weight_shapes` (packed FP4 uint8 weights, float8_e4m3fn
            block scales, float32 global scales, bf16 norm and router weights), on one CUDA device.
        hidden, intermediate, experts, top_k: the model's sizes (ints; hidden and intermediate
            multiples of 128).
    """

    def __init__(self, weights: dict[str, torch.Tensor], hidden: int, intermediate: int, experts: int, top_k: int) -> None:
        super().__init__()
        for name, tensor in weights.items():
            self.register_buffer(name, tensor, persistent=False)
        self.hidden, self.intermediate, self.experts, self.top_k = hidden, intermediate, experts, top_k

    def linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        """NVFP4 ``x @ W.T`` as vLLM and SGLang call it: activation quantized per call, the weight
        and its block scales passed transposed, the combined global scale as a 0-dim alpha."""
        x_q, x_sf = flashinfer.fp4_quantize(x, self.act_scale)
        w_q, w_sf = getattr(self, f"{name}_q"), getattr(self, f"{name}_sf")
        return flashinfer.mm_fp4(x_q, w_q.t(), x_sf.view(torch.float8_e4m3fn), w_sf.t(), self.alpha, torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: ``[M, hidden]`` bf16 -> ``[M, hidden]`` bf16."""
        h = torch.nn.functional.rms_norm(x, (self.hidden,), self.norm1, 1e-6)
        qkv = self.linear(h, "qkv")
        q, k, v = qkv.chunk(3, dim=-1)
        attn = torch.nn.functional.silu(q) * k + v  # a stand-in for attention: not the subject here
        x = x + self.linear(attn, "o")

        h = torch.nn.functional.rms_norm(x, (self.hidden,), self.norm2, 1e-6)
        logits = h @ self.router.t()
        h_q, h_sf = flashinfer.fp4_quantize(h, self.act_scale, is_sf_swizzled_layout=False)
        (moe,) = flashinfer.trtllm_fp4_block_scale_moe(
            routing_logits=logits.float(),
            routing_bias=None,
            hidden_states=h_q,
            hidden_states_scale=h_sf.view(torch.float8_e4m3fn),
            gemm1_weights=self.w13_q,
            gemm1_weights_scale=self.w13_sf,
            gemm1_bias=None,
            gemm1_alpha=None,
            gemm1_beta=None,
            gemm1_clamp_limit=None,
            gemm2_weights=self.w2_q,
            gemm2_weights_scale=self.w2_sf,
            gemm2_bias=None,
            output1_scale_scalar=self.out1_scale,
            output1_scale_gate_scalar=self.out1_gate_scale,
            output2_scale_scalar=self.out2_scale,
            num_experts=self.experts,
            top_k=self.top_k,
            n_group=None,
            topk_group=None,
            intermediate_size=self.intermediate,
            local_expert_offset=0,
            local_num_experts=self.experts,
            routed_scaling_factor=None,
            routing_method_type=RoutingMethodType.Renormalize,
            do_finalize=True,
        )
        return x + moe


def weight_shapes(hidden: int, intermediate: int, experts: int) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Name -> (shape, dtype) of every tensor :class:`NVFP4DecoderLayer` takes.

    The projections' block scales are 128x4-swizzled as ``fp4_quantize`` lays them out (rows padded to
    128, scale columns to 4: hidden a multiple of 128 needs no padding).
    """
    fp8 = torch.float8_e4m3fn
    return {
        "norm1": ((hidden,), torch.bfloat16),
        "norm2": ((hidden,), torch.bfloat16),
        "router": ((experts, hidden), torch.bfloat16),
        "act_scale": ((1,), torch.float32),
        "alpha": ((), torch.float32),
        "qkv_q": ((3 * hidden, hidden // 2), torch.uint8),
        "qkv_sf": ((3 * hidden, hidden // 16), fp8),
        "o_q": ((hidden, hidden // 2), torch.uint8),
        "o_sf": ((hidden, hidden // 16), fp8),
        "w13_q": ((experts, 2 * intermediate, hidden // 2), torch.uint8),
        "w13_sf": ((experts, 2 * intermediate, hidden // 16), fp8),
        "w2_q": ((experts, hidden, intermediate // 2), torch.uint8),
        "w2_sf": ((experts, hidden, intermediate // 16), fp8),
        "out1_scale": ((experts,), torch.float32),
        "out1_gate_scale": ((experts,), torch.float32),
        "out2_scale": ((experts,), torch.float32),
    }


def random_layer(hidden: int = 1024, intermediate: int = 512, experts: int = 8, top_k: int = 2, device: str = "cuda") -> NVFP4DecoderLayer:
    """A layer with random weights of the right shapes and dtypes (values are not a model's)."""
    weights = {}
    for name, (shape, dtype) in weight_shapes(hidden, intermediate, experts).items():
        if dtype in (torch.bfloat16, torch.float32):
            weights[name] = torch.rand(shape, device=device, dtype=dtype) * 0.1 + 0.95
        else:
            weights[name] = torch.randint(0, 255, shape, device=device, dtype=torch.uint8).view(dtype)
    return NVFP4DecoderLayer(weights, hidden, intermediate, experts, top_k)


def _scan_probe():
    """fp4patch's scan probe (its CPU stand-ins for the device queries), from the installed fp4patch or
    from the checkout this example lives in."""
    import importlib.util
    from pathlib import Path

    found = importlib.util.find_spec("fp4patch")
    base = Path(found.origin).parent if found and found.origin else Path(__file__).resolve().parent.parent / "fp4patch"
    spec = importlib.util.spec_from_file_location("_fp4patch_scan_probe", base / "probes" / "scan_probe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compile_on_fake_cuda(hidden: int = 1024, intermediate: int = 512, experts: int = 8, top_k: int = 2, tokens: int = 8) -> dict:
    """Compile the layer with ``fullgraph=True`` on CPU, on fake CUDA tensors (no GPU, no kernel runs).

    Returns ``{"graphs": int, "ops": [fp4patch op node targets], "error": first line or None,
    "shape": output shape or None}``. The device queries are answered by fp4patch's scan probe
    stand-ins (an SM100 device), installed for the rest of the process; FlashInfer is imported first.
    """
    _scan_probe().install_device_stubs(torch)
    from torch._subclasses.fake_tensor import FakeTensorMode

    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    error, shape = None, None
    with FakeTensorMode(allow_non_fake_inputs=True):
        weights = {}
        for name, (dims, dtype) in weight_shapes(hidden, intermediate, experts).items():
            weights[name] = torch.empty(dims, dtype=torch.uint8 if dtype == torch.float8_e4m3fn else dtype, device="cuda").view(dtype)
        layer = NVFP4DecoderLayer(weights, hidden, intermediate, experts, top_k)
        x = torch.empty(tokens, hidden, dtype=torch.bfloat16, device="cuda")
        try:
            shape = list(torch.compile(layer, fullgraph=True, backend=record)(x).shape)
        except Exception as exc:  # noqa: BLE001 - reported, as Dynamo's first line
            error = "%s: %s" % (type(exc).__name__, (str(exc).strip().splitlines() or [""])[0])
    ops = [str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function" and str(n.target).startswith("fp4patch.")]
    return {"graphs": len(graphs), "ops": ops, "error": error, "shape": shape}


def main() -> int:
    """Run on an sm100 GPU, else compile on fake CUDA tensors; print which, and the result. Exit 1 on failure."""
    if torch.cuda.is_available() and torch.cuda.get_device_capability() >= (10, 0):
        layer = random_layer()
        x = torch.randn(8, layer.hidden, device="cuda", dtype=torch.bfloat16)
        compiled = torch.compile(layer, fullgraph=True, mode="reduce-overhead")
        print(f"ran on {torch.cuda.get_device_name()} (sm{''.join(map(str, torch.cuda.get_device_capability()))}): "
              f"compiled with fullgraph=True and CUDA graphs, output {tuple(compiled(x).shape)}")
        return 0
    why = "no CUDA device" if not torch.cuda.is_available() else f"sm{''.join(map(str, torch.cuda.get_device_capability()))} (mm_fp4 needs sm100)"
    result = compile_on_fake_cuda()
    print(f"{why}: compiled on CPU with fake CUDA tensors (no kernel runs)")
    if result["error"]:
        print(f"not one graph: {result['error']} (is this FlashInfer patched? `fp4patch apply`)")
        return 1
    print(f"{result['graphs']} graph, output {result['shape']}; fp4patch op nodes:")
    for op in result["ops"]:
        print(f"  {op}")
    return 0 if result["graphs"] == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
