"""fp4patch: statically patch an installed FlashInfer so that FP4 quantization works under torch.compile."""

__version__ = "0.1.0"
