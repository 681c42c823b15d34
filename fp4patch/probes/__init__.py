"""The probes: scripts run by path in the target interpreter, where torch and FlashInfer live and fp4patch may not.

What it owns: compiling every case of the FP4 path (:mod:`trace_probe`), the scan of every FP4/FP8 function
compiled nested and handed directly (:mod:`scan_probe`, with its call table in :mod:`scan_calls`), the fake check
(:mod:`fake_check_probe`), torch's opcheck of the rendered ops (:mod:`opcheck_probe`) and what they share: fake
CUDA tensors, stubbed device queries, a kernel recorder and the grid loader (:mod:`oracle`).

What it may import: nothing of fp4patch. A probe imports the standard library at module level, torch and FlashInfer
inside its functions, and its siblings by path (the directory of the script is ``sys.path[0]``). This package is
a package only so that fp4patch's checks can find the files (``Path(__file__).parent``) and the tests can import
them.
"""
