"""Check patched ops' fakes against the installed wrappers' own output allocation, on CPU, before trusting them.

When a FlashInfer release differs from every release an op was verified on, its fake cannot be taken
on trust: :func:`run_fake_check` runs ``fake_check_probe.py`` in the target interpreter (one child for
every function), which runs each public wrapper eagerly on fake CUDA tensors with only the kernel launch
replaced (``oracle.py``) and the op's fake on the same arguments, over the op's case grid
(``patches/<distribution>/grids/<function>.py``, the grid the test suite checks too), and compares
their (shape, stride, dtype). The site-packages must already be patched (``fp4patch apply`` ran there,
or on the temporary copy being checked): the probe calls the module's ``_fp4patch_<function>_entry``.

The request data comes from a spec target (:func:`requests_for`): each ``custom-op`` operation's
function, its parameters in that release and its release data (:func:`fp4patch.ops.release.release_data`).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..locations import PROBES_DIR
from ..target.environment import TargetEnvironment
from .trace import _run_script

FAKE_CHECK_PROBE = PROBES_DIR / "fake_check_probe.py"
ORACLE = PROBES_DIR / "oracle.py"
#: where a spec's case grids are: ``<specs dir>/<distribution>/grids/<function>.py``, beside its op sources
GRIDS_DIR = "grids"


@dataclass(frozen=True)
class FakeCheckRequest:
    """One function to check.

    Attributes:
        function: the public wrapper's name (``flashinfer.<function>``), e.g. ``"mxfp8_quantize"``.
        grid: path of its case grid module (``grids/<function>.py``; it may be missing: the result then
            says so and is not ok).
        params: the wrapper's parameter names in the release checked, in order (the target's ``params``).
        release: the target's release data: the op source's ``RELEASE`` updated by the target's
            ``[target.operation.release]`` (JSON values).
    """

    function: str
    grid: Path
    params: tuple[str, ...]
    release: dict[str, Any] = field(default_factory=dict)


@dataclass
class FakeCheckResult:
    """What the fake check found for one function.

    Attributes:
        ok: every case was compared or deliberately skipped and none differs; False also when the
            function could not be checked (``error``), a case is ``unchecked`` or ``not_visible``.
        cases: the grid's case count; ``compared``: those whose outcomes were compared (or whose refusal
            by the fake was checked); ``skipped_kernel``: those the C++ kernel refuses (not comparable on CPU).
        failures: one line per differing case, naming the case and the first output whose shape, stride or
            dtype differs (``"M=129: output 1 (sf): wrapper (129, 4) stride (4, 1) uint8, fake (256, 4) stride
            (4, 1) uint8"``), or both outcomes when one raised.
        not_visible: case names whose wrapper result holds a kernel launch's return value (allocated in C++,
            not visible on CPU): not checked.
        unchecked: ``"case: reason"`` for each case the grid says cannot be checked on CPU.
        error: why the function could not be checked at all ("" when it was).
        reasons: case name -> the grid's reason (its ``kernel_outputs``) for each ``not_visible`` case that
            gives one (read from the grid in this process: the probe's JSON carries the names alone).
        fake_raised: the ``not_visible`` cases in which the fake raised an error that is not fp4patch's own refusal
            while the wrapper returned (past the kernel launch, its outputs unseen): the fake refuses what the release
            accepts, whatever the kernel's outputs are (:mod:`fp4patch.checks.cpu_check` then takes no launcher evidence).
    """

    ok: bool
    cases: int = 0
    compared: int = 0
    skipped_kernel: int = 0
    failures: list[str] = field(default_factory=list)
    not_visible: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    error: str = ""
    reasons: dict[str, str] = field(default_factory=dict)
    fake_raised: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One phrase for a failed check: the error, the first differing case, the cases whose
        outputs the kernel allocates, or the cases the grid cannot check; "" when ``ok``."""
        if self.ok:
            return ""
        if self.error:
            return self.error
        if self.failures:
            more = f" (and {len(self.failures) - 1} more of {self.compared} compared cases)" if len(self.failures) > 1 else ""
            return f"the fake differs from the wrapper's own allocation: {self.failures[0]}{more}"
        if self.not_visible:
            first = self.not_visible[0]
            why = f"{self.reasons[first]}; " if first in self.reasons else ""
            return f"the outputs of {first!r} come from the kernel, which the CPU cannot see ({why}{len(self.not_visible)} case(s))"
        return f"not checkable on CPU: {self.unchecked[0]}"


def requests_for(spec: Any, target: Any) -> list[FakeCheckRequest]:
    """One request per ``custom-op`` operation of ``target`` (a :class:`fp4patch.catalog.spec.Target` of ``spec``,
    a :class:`fp4patch.catalog.spec.Spec`), in order; the grid is looked up beside the spec
    (``<spec dir>/grids/<function>.py``). A target without custom ops gives ``[]``.
    """
    from ..ops.release import release_data

    requests = []
    for kind, kwargs in target.operation_specs:
        if kind != "custom-op":
            continue
        op = kwargs["target"]  # a custom_op.CustomOpTarget
        grid = Path(spec.path).parent / GRIDS_DIR / f"{op.function}.py"
        requests.append(FakeCheckRequest(op.function, grid, tuple(op.params), release_data(op)))
    return requests


def _dims(values: list) -> str:
    return "(" + ", ".join(str(v) for v in values) + ("," if len(values) == 1 else "") + ")"


def _show_leaf(leaf: Any) -> str:
    if isinstance(leaf, list) and len(leaf) >= 3 and isinstance(leaf[0], list):
        text = f"{_dims(leaf[0])} stride {_dims(leaf[1])} {str(leaf[2]).removeprefix('torch.')}"
        return text + (f" (the argument {leaf[3]})" if len(leaf) > 3 else "")
    return str(leaf)


def _show(outcome: Any) -> str:
    if not isinstance(outcome, dict):
        return "nothing"
    if "error" in outcome:
        cls, message = outcome["error"]
        return f"raised {cls}: {message}" if message else f"raised {cls}"
    return "returned " + ", ".join(_show_leaf(leaf) for _, leaf in _leaves(outcome.get("ok")))


def _leaves(meta: Any, path: tuple = ()) -> list[tuple[tuple, Any]]:
    """``(path, leaf)`` of each output (the probe's nesting: a tensor is ``[shape, stride, dtype(, arg)]``)."""
    tensor = isinstance(meta, list) and len(meta) in (3, 4) and isinstance(meta[0], list) and isinstance(meta[1], list) and isinstance(meta[2], str)
    if tensor or not isinstance(meta, list):
        return [(path, meta)]
    return [found for i, item in enumerate(meta) for found in _leaves(item, path + (i,))]


def describe_failure(case: str, real: Any, fake: Any, outputs: list[str] | tuple[str, ...] = ()) -> str:
    """One line for a differing case: the first output that differs, or both outcomes.

    ``real`` / ``fake`` are the probe's outcomes (``{"ok": metadata}`` / ``{"error": [class, line]}``; ``real``
    None for a refusal case, where only the fake ran); ``outputs`` names the top-level outputs
    (``OUTPUTS`` of the grid; one name for a wrapper that returns a single tensor).
    """
    if real is None:
        return f"{case}: the fake should refuse this call (an fp4patch error) but {_show(fake)}"
    if isinstance(real, dict) and isinstance(fake, dict) and "ok" in real and "ok" in fake:
        ours, theirs = _leaves(real["ok"]), _leaves(fake["ok"])
        if [p for p, _ in ours] == [p for p, _ in theirs]:
            for (path, a), (_, b) in zip(ours, theirs):
                if a != b:
                    where = ".".join(str(i) for i in path) or "0"
                    if path:
                        name = outputs[path[0]] if path[0] < len(outputs) else ""
                    else:  # the wrapper returns one tensor, not a list (mm_fp4's out)
                        name = outputs[0] if len(outputs) == 1 else ""
                    label = f"output {where}" + (f" ({name})" if name else "")
                    return f"{case}: {label}: wrapper {_show_leaf(a)}, fake {_show_leaf(b)}"
        return f"{case}: wrapper returned {len(ours)} output(s), fake {len(theirs)}: wrapper {_show(real)}; fake {_show(fake)}"
    return f"{case}: wrapper {_show(real)}; fake {_show(fake)}"


def _result(summary: dict[str, Any]) -> FakeCheckResult:
    outputs = summary.get("outputs", [])
    result = FakeCheckResult(
        ok=False,
        cases=summary.get("cases", 0),
        compared=summary.get("compared", 0),
        skipped_kernel=summary.get("skipped_kernel", 0),
        failures=[describe_failure(f["case"], f.get("real"), f.get("fake"), outputs) for f in summary.get("failures", [])],
        not_visible=list(summary.get("not_visible", [])),
        unchecked=[f"{u['case']}: {u['reason']}" for u in summary.get("unchecked", [])],
        error=summary.get("error", ""),
        fake_raised=list(summary.get("not_visible_fake_raised", [])),
    )
    result.ok = not (result.error or result.failures or result.not_visible or result.unchecked)
    return result


def run_fake_check(env: TargetEnvironment, site_packages: Path, requests: list[FakeCheckRequest], timeout: float = 900) -> dict[str, FakeCheckResult]:
    """Run the fake check of ``requests`` in ``env.python`` on the patched FlashInfer in ``site_packages``.

    One child interpreter for all requests (``fake_check_probe.py``, by path: the target needs torch and
    FlashInfer's import-time dependencies, not fp4patch); FlashInfer is imported from ``site_packages``
    (first on the child's ``sys.path``; one from elsewhere is refused). ``timeout`` in seconds for the
    whole run. Returns a :class:`FakeCheckResult` per requested function name; a request whose grid file
    does not exist is not sent and comes back not ok, with the missing grid as its error.

    Raises:
        EnvironmentProblem: the interpreter cannot import torch or FlashInfer (or imports it from elsewhere
            than ``site_packages``), the probe times out, or it prints no result.
    """
    results: dict[str, FakeCheckResult] = {}
    sent = []
    for request in requests:
        if not Path(request.grid).is_file():
            results[request.function] = FakeCheckResult(ok=False, error=f"no case grid for {request.function} ({request.grid}): its fake cannot be checked")
        else:
            sent.append({"function": request.function, "grid": str(request.grid), "params": list(request.params), "release": request.release})
    if not sent:
        return results
    with tempfile.TemporaryDirectory(prefix="fp4patch-fake-check-") as tmp:
        path = Path(tmp) / "request.json"
        path.write_text(json.dumps({"oracle": str(ORACLE), "functions": sent}), encoding="utf-8")
        answer = _run_script(FAKE_CHECK_PROBE, ["--request", str(path)], env, site_packages, timeout, "fake check",
                             "the fake check needs torch and flashinfer's import-time dependencies there", label="fp4patch apply")
    for item in sent:
        summary = answer.get("functions", {}).get(item["function"])
        results[item["function"]] = _result(summary) if summary is not None else FakeCheckResult(ok=False, error="the probe reported nothing")
    for request in requests:
        if results[request.function].not_visible:
            results[request.function].reasons = _kernel_output_reasons(request, results[request.function].not_visible)
    return {r.function: results[r.function] for r in requests}


def _kernel_output_reasons(request: FakeCheckRequest, names: list[str]) -> dict[str, str]:
    """The grid's ``kernel_outputs`` reason of each case in ``names`` that has one (the grid loaded by path
    here: it imports only the standard library at module level); {} when the grid cannot say."""
    from ..probes.oracle import load_grid

    try:
        module = load_grid(str(request.grid), f"_fp4patch_grid_reasons_{request.function}")
        cases = module.cases(frozenset(request.params), dict(request.release))
    except Exception:  # noqa: BLE001 - the names stand without reasons
        return {}
    wanted = set(names)
    return {c["name"]: str(c["kernel_outputs"]) for c in cases if c.get("name") in wanted and c.get("kernel_outputs")}
