"""fp4patch: statically patch an installed FlashInfer so that FP4 quantization works under torch.compile.

The folders are the subsystems (``docs/architecture.md``): ``cli/`` (the command line), ``tools/`` (``verify
--against``, ``make compat``, ``fp4patch new``), ``engine/`` (the only writer of site-packages), ``checks/`` (the
probes run in the target interpreter), ``catalog/`` (specs, releases, evidence), ``probes/`` (scripts run there),
``target/`` (the target environment), ``ops/`` (the op-source language), ``codemods/`` (one libcst transformer
per patch operation), and here the base: errors and exit codes, locations, state names, signals. The command line
and the spec format are the interfaces; the modules are internals and move at will (no Python API is documented).
"""

__version__ = "0.1.0"
