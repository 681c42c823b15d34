"""An NVFP4 decoder layer as a serving engine writes it, compiled with ``torch.compile(fullgraph=True)``.

After ``fp4patch apply`` every FlashInfer call below traces as one fp4patch custom op, so the whole
layer is one graph — what SGLang's piecewise CUDA graphs and vLLM's compiled runner need. Unpatched,
Dynamo stops at the first FlashInfer call (its JIT module loader). The layer:

    x -> rms_norm -> fp4_quantize -> mm_fp4 (qkv projection, transposed weight and scales, 0-dim alpha)
      -> a stand-in for attention (elementwise) -> fp4_quantize -> mm_fp4 (output projection) -> + x
      -> rms_norm -> router (bf16 matmul) -> fp4_quantize -> trtllm_fp4_block_scale_moe -> + x

Shapes: ``x`` is ``[M, hidden]`` bf16; NVFP4 weights are packed uint8 ``[N, K/2]`` with float8_e4m3fn
block scales ``[N, K/16]``; the MoE weights are per expert. On a Blackwell GPU (sm100), build the layer
with :func:`random_layer` and call it; the test ``tests/test_example_decoder_layer.py`` compiles it on
CPU with fake CUDA tensors for FlashInfer 0.6.0 and 0.7.4 and checks it is one graph.

Run: ``python examples/nvfp4_decoder_layer.py`` (needs an sm100 GPU and a patched FlashInfer).
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


if __name__ == "__main__":
    layer = random_layer()
    x = torch.randn(8, layer.hidden, device="cuda", dtype=torch.bfloat16)
    compiled = torch.compile(layer, fullgraph=True, mode="reduce-overhead")
    print(compiled(x).shape)
