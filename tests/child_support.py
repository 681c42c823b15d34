"""Set-up shared by the child scripts (``tests/*_child.py``), each run in a fresh interpreter.

The engine children (``tests/engine_sglang_child.py``, ``tests/engine_vllm_child.py``) load it by path (the path
their test passes); the others import it as ``child_support`` (a script's folder is first on ``sys.path``). It needs
the standard library and torch (passed in: it imports no torch itself), not fp4patch; ``fp4patch/probes/scan_probe.py``,
loaded by path, gives the device stubs and the graph helpers. For every child:

* :func:`emit`: the one result line (a mark, then JSON) that ``tests/python_forkserver.py: child_json`` reads back;
* :func:`stubbed_trace_probe`: the scan probe's device stubs (an SM100 device on CPU), installed before FlashInfer is
  imported, and the trace probe's graph helpers;
* :func:`tensor_maker`, :func:`layout`, :func:`error_line`: empty tensors on the fake ``cuda`` device or ``meta``,
  a tensor's ``[shape, stride, dtype]`` with symbolic sizes, an exception's first line;
* :class:`Compiles`: one ``torch.compile``'s FX graphs, recorded by its backends (run as traced, or under a
  ``FakeTensorMode`` so that an op's fake stands in for its kernel, or through AOTAutograd first), and what Dynamo
  counted (graph breaks, frames).

An engine (SGLang, vLLM) is installed from the registry without its dependencies (``tests/conftest.py:
engine_site``), so it imports packages a CPU test interpreter lacks. What this module provides for the engine
children, in the order a child uses it:

* :func:`prepare_torch`: the scan probe's device stubs (an SM100 device on CPU), then the parts of torch that look
  for optional packages at import (Dynamo, the Inductor wrapper ``torch.compile`` builds, ``has_triton()``), loaded
  *before* any stand-in exists, so torch sees the interpreter as it is;
* :class:`MissingPackages`: stand-in modules for named packages that are not installed, served only to importers
  under named module prefixes (the engines; FlashInfer's comm module for ``cuda-python``), and taken out of
  ``sys.modules`` again after the engine's import (:meth:`MissingPackages.withdraw`) so torch never finds them. A
  package that is installed is always the real one (the finder runs last). Every call of a stand-in made after
  :meth:`MissingPackages.arm` is recorded: a traced engine function that touched one did not run as the engine
  runs, and the tests fail on it;
* :func:`cuda_reported`: ``torch.cuda.is_available()`` true and ``torch.version.cuda`` set while the engine is
  imported and its objects are built, so that it takes its CUDA paths (both engines decide at import); restored
  before tracing, because Dynamo saves the CUDA RNG state when CUDA says it is available;
* :func:`trace`: ``torch.compile(fullgraph=True)`` of a callable on fake CUDA tensors with a backend that records
  the FX graphs, and what happened (graphs, graph breaks, non-aten op nodes, the outputs' shapes and dtypes, or
  the error, where in FlashInfer and in the engine tracing stopped, and the FlashInfer files on the stack).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import traceback


def load_by_path(path, name):
    """The module at ``path`` under the name ``name`` (registered in ``sys.modules``)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------- #
# Every child: its result line, device stubs, tensors, compiles
# --------------------------------------------------------------------------- #
def emit(mark, payload):
    """Print the child's result: one line, ``mark`` then ``payload`` as JSON (``child_json`` reads the last one)."""
    print(mark + json.dumps(payload))


def stubbed_trace_probe(torch, scan_probe_path, name):
    """Load ``fp4patch/probes/scan_probe.py`` (``scan_probe_path``) as ``name``, install its device stubs (an SM100 device on
    CPU: import FlashInfer after this) and return its trace probe (``_custom_op_nodes`` of a graph, ...)."""
    scan_probe = load_by_path(scan_probe_path, name)
    scan_probe.install_device_stubs(torch)
    return scan_probe._trace_probe()


def tensor_maker(torch, device):
    """``new(shape, dtype)``: an empty tensor on ``device``: ``"cuda"`` (a fake CUDA tensor inside a ``FakeTensorMode``,
    with the device stubs) or ``"meta"`` (Dynamo then makes its own ShapeEnv for it, as for real inputs)."""
    return lambda shape, dtype: torch.empty(shape, dtype=dtype, device=device)


def layout(t):
    """``[shape, stride, dtype]`` of tensor ``t``, each symbolic size as ``"sym:<expression>"``."""

    def dim(d):
        return d if isinstance(d, int) else f"sym:{d}"

    return [[dim(d) for d in t.shape], [dim(s) for s in t.stride()], str(t.dtype)]


def error_line(exc):
    """``Class: first line of the message`` of exception ``exc``."""
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"


class Compiles:
    """The FX graphs of one ``torch.compile``, recorded by the backends below; made after ``torch._dynamo.reset()``,
    with Dynamo's counters cleared, so that :meth:`breaks` and :meth:`frames` count this compile only."""

    def __init__(self, torch):
        self.torch = torch
        self.graphs = []
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()

    def record(self, gm, example_inputs):
        """Backend: record the graph; it runs as traced."""
        self.graphs.append(gm)
        return gm.forward

    def under_fake(self, fn):
        """``fn`` run under a ``FakeTensorMode`` with a ShapeEnv of its own: an op's fake in place of its kernel."""
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        def run(*args):
            with FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv()):
                return fn(*args)

        return run

    def fake(self, gm, example_inputs):
        """Backend: record the graph; it runs under :meth:`under_fake` (the outputs' shapes for each call's sizes)."""
        self.graphs.append(gm)
        return self.under_fake(gm)

    def aot(self, gm, example_inputs):
        """Backend: record Dynamo's graph, then take it through AOTAutograd (which functionalizes an op's mutations,
        as Inductor does); its forward runs under :meth:`under_fake`."""
        from torch._dynamo.backends.common import aot_autograd

        self.graphs.append(gm)
        return aot_autograd(fw_compiler=lambda fw, fw_inputs: self.under_fake(fw))(gm, example_inputs)

    def breaks(self):
        """Graph breaks Dynamo counted."""
        return sum(self.torch._dynamo.utils.counters["graph_break"].values())

    def frames(self):
        """Frames Dynamo compiled."""
        return self.torch._dynamo.utils.counters["stats"]["unique_graphs"]

    def ops(self, probe):
        """The custom-op nodes of every graph, in order (``probe``: the trace probe, :func:`stubbed_trace_probe`)."""
        return [n for gm in self.graphs for n in probe._custom_op_nodes(gm)]

    def inputs(self):
        """The tensor inputs of the first graph: ``(placeholder name, example tensor)`` pairs, in order."""
        if not self.graphs:
            return []
        return [(n.name, n.meta["example_value"]) for n in self.graphs[0].graph.nodes
                if n.op == "placeholder" and isinstance(n.meta.get("example_value"), self.torch.Tensor)]


def prepare_torch(torch, scan_probe_path):
    """Install the scan probe's device stubs and load what torch reads about optional packages; returns the probe.

    The stubs come first (Dynamo captures some ``torch.cuda`` functions when it is imported). Then Dynamo, the
    Inductor modules ``torch.compile(...)`` loads when a module decorates a function with it (SGLang does at
    import), and ``torch.utils._triton.has_triton()`` (cached): all of them probe for ``triton`` at import, and
    must see the real interpreter, not a stand-in. And one fake CUDA tensor, before :func:`cuda_reported` ever
    says CUDA is available.
    """
    probe = load_by_path(scan_probe_path, "_engine_scan_probe")
    probe.install_device_stubs(torch)
    import torch._dynamo
    from torch._subclasses.fake_tensor import FakeTensorMode

    # The first fake CUDA tensor initialises the GPU context (a real CUDA tensor) when CUDA says it is available
    # (torch 2.11: fake_tensor.init_gpu_context, cached per device): make it now, while CUDA says it is not.
    with FakeTensorMode():
        torch.empty(1, device="cuda")
    torch.compile(lambda: None)  # builds (never runs) the Inductor wrapper, loading its modules
    try:
        from torch.utils._triton import has_triton

        has_triton()
    except ImportError:  # an older torch without the helper
        pass
    return probe


@contextlib.contextmanager
def cuda_reported(torch, version="13.0"):
    """``torch.cuda.is_available()`` returns True and ``torch.version.cuda`` is ``version`` (where it was None)
    inside the block; both are restored after it.

    After the block ``is_available()`` answers what it answered before it, also where the engine's import changed
    how torch decides (vLLM sets ``PYTORCH_NVML_BASED_CUDA_CHECK=1``, which makes a CUDA build of torch count
    devices with ``device_count()``, stubbed to 1 here): without a GPU, Dynamo must not read the CUDA RNG state.
    """
    available, cuda = torch.cuda.is_available, torch.version.cuda
    before = bool(available())
    torch.cuda.is_available = lambda: True
    if cuda is None:
        torch.version.cuda = version
    try:
        yield
    finally:
        torch.cuda.is_available = available if bool(available()) == before else (lambda: before)
        torch.version.cuda = cuda


# --------------------------------------------------------------------------- #
# Stand-ins for missing packages
# --------------------------------------------------------------------------- #
_IMPORT_MACHINERY = ("<frozen importlib", os.path.dirname(importlib.__file__) + os.sep)


def _importer(skip_file):
    """``__name__`` of the module whose code is importing: the first frame outside the import machinery (and
    outside ``skip_file``, this module)."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_IMPORT_MACHINERY) and filename != skip_file:
            return str(frame.f_globals.get("__name__", ""))
        frame = frame.f_back
    return ""


class _StandInMeta(type):
    """Classes that stand for any attribute of a missing package: attribute access gives a nested stand-in,
    ``X | Y``, ``X[...]``, item assignment and iteration work as a module body needs them to."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        child = _StandInMeta(name, (_StandIn,), {"__module__": f"{cls.__module__}.{cls.__qualname__}", "_registry": cls._registry})
        setattr(cls, name, child)
        return child

    def __call__(cls, *args, **kwargs):
        cls._registry.record(f"{cls.__module__}.{cls.__qualname__}")
        return super().__call__(*args, **kwargs)

    def __getitem__(cls, key):
        return cls

    def __setitem__(cls, key, value):
        pass

    def __or__(cls, other):
        return cls

    def __ror__(cls, other):
        return cls

    def __iter__(cls):
        return iter(())


class _StandIn(metaclass=_StandInMeta):
    """An instance stands for whatever a stand-in call returned: calls and attributes give stand-ins again."""

    _registry = None

    def __init__(self, *args, **kwargs):
        pass

    def __init_subclass__(cls, **kwargs):  # msgspec- or pydantic-style class keywords on an engine subclass
        pass

    @classmethod
    def __get_pydantic_core_schema__(cls, source, handler):  # a stand-in type in an engine's pydantic model
        from pydantic_core import core_schema

        return core_schema.any_schema()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(type(self), name)

    def __call__(self, *args, **kwargs):
        self._registry.record(f"{type(self).__module__}.{type(self).__qualname__}()")
        return self

    def __getitem__(self, key):
        return self

    def __setitem__(self, key, value):
        pass

    def __iter__(self):
        return iter(())


class _StandInModule(type(sys)):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        stand_in = _StandInMeta(name, (_StandIn,), {"__module__": self.__name__, "_registry": self.__registry__})
        setattr(self, name, stand_in)
        return stand_in


class MissingPackages(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """A meta-path finder (appended last: an installed package always wins) serving stand-in modules.

    ``packages`` maps a package or module name (a top-level package, or a compiled extension module of an engine
    whose binaries are not unpacked, ``vllm._C_stable_libtorch``) to ``(reason, importers)``: the stand-in is served only when the
    importing module's name starts with one of ``importers`` (a tuple of module-name prefixes); anyone else (torch
    above all) gets the ``ModuleNotFoundError`` the interpreter would give. ``values`` maps ``"pkg.attr"`` to a
    value set on the stand-in module (for a module body that computes with it at import); ``aliases`` maps a
    package to a real module served in its place (``regex`` -> the standard library's ``re``, whose API it extends). ``used`` lists, in
    order, the stand-ins called after :meth:`arm`.
    """

    def __init__(self, packages, values=None, aliases=None):
        self.packages = dict(packages)
        self.values = dict(values or {})
        self.aliases = dict(aliases or {})
        self.armed = False
        self.used = []
        self.served = set()

    def install(self):
        """Append the finder to ``sys.meta_path``; returns self."""
        sys.meta_path.append(self)
        return self

    def missing(self):
        """The entries of ``packages`` a stand-in (or alias) was served for, sorted."""
        return sorted(self.served)

    def unneeded(self):
        """The entries of ``packages`` that were neither served nor are installed: entries no import asked for,
        which the list should not carry (an installed package is simply used), sorted."""
        return sorted(key for key in self.packages if key not in self.served and importlib.util.find_spec(key) is None)

    def record(self, what):
        if self.armed:
            self.used.append(what)

    def arm(self):
        """From now on, record every call of a stand-in (``used``)."""
        self.armed = True

    def withdraw(self):
        """Take the stand-in modules out of ``sys.modules`` (the engine's modules keep theirs): a later import by
        anyone but an allowed importer finds nothing."""
        for name in [n for n in sys.modules if self._key(n) in self.served]:
            del sys.modules[name]

    def _key(self, fullname):
        """The entry of ``packages`` that ``fullname`` is (or is inside of), or None."""
        for key in self.packages:
            if fullname == key or fullname.startswith(key + "."):
                return key
        return None

    def find_spec(self, fullname, path=None, target=None):
        key = self._key(fullname)
        if key is None:
            return None
        _reason, importers = self.packages[key]
        if not _importer(__file__).startswith(tuple(importers)):
            return None
        self.served.add(key)
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        if spec.name in self.aliases:
            return importlib.import_module(self.aliases[spec.name])
        module = _StandInModule(spec.name)
        module.__registry__ = self
        module.__path__ = []
        return module

    def exec_module(self, module):
        if not isinstance(module, _StandInModule):
            return
        for key, value in self.values.items():
            owner, _, attr = key.rpartition(".")
            if owner == module.__name__:
                setattr(module, attr, value)


def bare_package(name, directory):
    """Register package ``name`` (files in ``directory``) without running its ``__init__.py``: its submodules
    import as usual. For a package whose ``__init__`` only gathers an API the code under test does not use."""
    module = type(sys)(name)
    module.__path__ = [str(directory)]
    module.__file__ = os.path.join(str(directory), "__init__.py")
    module.__package__ = name
    sys.modules[name] = module
    return module


# --------------------------------------------------------------------------- #
# Tracing
# --------------------------------------------------------------------------- #
def meta(value, torch):
    """JSON form of an output: a tensor as ``[shape, dtype]``, a dtype as its name, sequences element-wise,
    anything else as its type name."""
    if isinstance(value, torch.Tensor):
        return [list(value.shape), str(value.dtype)]
    if isinstance(value, torch.dtype):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [meta(v, torch) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return type(value).__name__


def _package_frames(exc, package_dir, probe):
    """The files (relative to the package's parent) of every frame inside ``package_dir`` on the exception's
    stacks (Dynamo's user stack, then the traceback), in order, without repeats."""
    root = os.path.dirname(os.path.realpath(package_dir))
    prefix = os.path.realpath(package_dir) + os.sep
    found = []
    for stack in probe._frames(exc):
        for filename, line in stack:
            real = os.path.realpath(filename) if filename else ""
            if real.startswith(prefix):
                where = f"{os.path.relpath(real, root)}:{line}".replace(os.sep, "/")
                if where not in found:
                    found.append(where)
    return found


def trace(fn, args, *, torch, probe, fake_mode, flashinfer_dir, engine_dir, stand_ins=None):
    """``torch.compile(fn, fullgraph=True, dynamic=False)`` called on ``args`` (fake CUDA tensors of
    ``fake_mode``), with a backend that records each FX graph; after ``torch._dynamo.reset()``.

    Returns a dict: ``graphs`` and ``breaks`` (counts), ``ops`` (the non-aten op nodes, ``ns::name``, in graph
    order), ``outputs`` (:func:`meta` of the result), and on failure ``error`` (class and first line),
    ``explanation`` (Dynamo's), ``flashinfer_at`` / ``engine_at`` (the innermost frame inside FlashInfer / the
    engine, ``file:line``), ``flashinfer_frames`` (every FlashInfer frame on the stacks) and ``tb`` (the end of
    the traceback); ``stand_ins`` the stand-ins called during the call.
    """
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    graphs = []
    used_before = len(stand_ins.used) if stand_ins is not None else 0

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    rec = {}
    try:
        with fake_mode:
            result = torch.compile(fn, fullgraph=True, backend=record, dynamic=False)(*args)
        rec["outputs"] = meta(result, torch)
    except Exception as exc:  # noqa: BLE001 - the failure is the result
        lines = str(exc).strip().splitlines()
        rec["error"] = "{}: {}".format(type(exc).__name__, lines[0] if lines else "")
        explanation = [ln.strip() for ln in lines if ln.strip().startswith("Explanation:")]
        rec["explanation"] = explanation[0] if explanation else None
        for key, directory in (("flashinfer_at", flashinfer_dir), ("engine_at", engine_dir)):
            where, line, source = probe.stopped_at(exc, directory)
            rec[key] = f"{where}:{line}" if where else None
            rec[key + "_source"] = source
        rec["flashinfer_frames"] = _package_frames(exc, flashinfer_dir, probe)
        rec["tb"] = traceback.format_exc()[-4000:]
    rec["graphs"] = len(graphs)
    rec["breaks"] = sum(torch._dynamo.utils.counters["graph_break"].values())
    rec["ops"] = [n for gm in graphs for n in probe._trace_probe()._custom_op_nodes(gm)]
    rec["stand_ins"] = stand_ins.used[used_before:] if stand_ins is not None else []
    return rec
